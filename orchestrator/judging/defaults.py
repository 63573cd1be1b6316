"""Each judging default, written once; the options records, both faces' signatures and help, and
the bodies read them from here."""

PEER_THRESHOLD = 0.10  # a probe or group this fraction below what its peers deliver, beyond their noise, is slow
# (qualify, report, watch's drift and flags)
DROP_THRESHOLD = 0.05  # compare: a drop this fraction below the baseline, beyond the noise, is flagged
MIN_FRACTION = 0.8  # with an expected value: below this fraction of it is slow
DISPATCH_BOUND = 1.5  # a call within this factor of c10d's own cost of one (the dispatch floor) times torch
