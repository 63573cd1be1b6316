"""How often `collbench compare` is wrong: false positives (a healthy link flagged) and false
negatives (a slowed link missed), over simulated runs driven through the real comparison
(orchestrator.analysis.compare.compare, the code `collbench compare` runs).

A run gives every link of one shape (one collective, size and pattern) a mean log time of
log t0 + e, e drawn afresh for each link in each run (the run-to-run noise), and `iters`
iterations around it (the iteration noise). Noise profiles, from measurements:
- host: intra-node links of one shared 2-core machine (this repository's lab host): between two
  runs of the same sweep, healthy links moved -34% to +93% (issue 21); iterations' cv ~0.3 at
  4 MiB. Modelled as a Student-t(3) run effect of scale 0.2 in log time (heavy tails).
- lab: links shaped by tc on that host (inter-node lab links): a few percent between runs.
- gpu: GPU fleets, 1-3% run to run (issue 21's figure for NCCL on H100-class nodes); latency-bound
  sizes 10% a run (issue 42: "by tens of percent on GPU fleets").
- shared: this host as measured with its rows' contention recorded (run-level alarms only).
Layouts: `links`, N links of one shape, one link slowed (a node's intra-node fabric); `pairs`, every
pair of M nodes (N = M(M-1)/2 links), one node slowed, so its M-1 pairs are. Baselines: one run
(noise from the shape's peers) or three runs of the same sweep (noise from the runs).

Run-level false alarms (`--consumer alarms`): default sweeps (nine collectives, 16 B to 16 MiB;
latency-bound sizes with the profile's latency spread) of an unchanged cluster compared whole: the
fraction of compares that exit 1. Profile `shared` is this host as measured with its contention
recorded (docs/PERFORMANCE.md section 7), quiet or with a core taken.

    python benchmarks/compare_errors.py [--healthy-links 600] [--slow-trials 60] [--seed 0]
    python benchmarks/compare_errors.py --consumer alarms [--compares 100]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from orchestrator.analysis.compare import compare

MSG_BYTES = 4 << 20
THRESHOLD = 0.05  # compare's default


@dataclass(frozen=True)
class Profile:
    run_scale: float  # scale of a link's run effect on log time (bandwidth-bound sizes)
    run_df: float | None  # Student-t degrees of freedom of that effect (None: normal)
    iter_sigma: float  # sigma of one iteration's log time about the run's mean
    iters: int
    backend: str  # what the rows say ran: the judge's prior follows it
    topology: str  # intra (a node's own fabric) or inter (a network link): the prior follows it too
    latency_scale: float = 0.0  # the run effect's scale for latency-bound sizes (a sweep's small sizes)
    latency_df: float | None = None
    oversub: float | None = None  # the contention every run of the profile measured under (None: not recorded)


PROFILES = {
    "host": Profile(run_scale=0.2, run_df=3, iter_sigma=0.3, iters=20, backend="gloo", topology="intra",
                    latency_scale=0.2, latency_df=3),
    # this host as its priors have it, its contention recorded (docs/PERFORMANCE.md section 7): a change
    # between two quiet runs spreads 0.30 (bandwidth-bound, tails near normal) and 0.40 (latency-bound,
    # Student-t(6) tails); per run that is 0.21 and 0.25
    "shared": Profile(run_scale=0.21, run_df=None, iter_sigma=0.3, iters=20, backend="gloo", topology="intra",
                      latency_scale=0.25, latency_df=6, oversub=1.0),
    "lab": Profile(run_scale=0.02, run_df=None, iter_sigma=0.05, iters=20, backend="gloo", topology="inter",
                   latency_scale=0.05),
    # GPU fleets: small sizes by tens of percent (issue 42), 10% a run
    "gpu": Profile(run_scale=0.01, run_df=None, iter_sigma=0.01, iters=20, backend="nccl", topology="intra",
                   latency_scale=0.10),
}


def _links(layout: str, n: int, culprits: int = 1) -> tuple[list[list[str]], list[bool]]:
    """(Each link's node IPs, whether the planted fault slows it) for n nodes, `culprits` of them slowed."""
    ips = [f"10.1.{i // 250}.{i % 250}" for i in range(n)]
    bad = {(n // 2 + k) % n for k in range(culprits)}
    if layout == "links":
        return [[ip, ip] for ip in ips], [i in bad for i in range(n)]
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
    return [[ips[a], ips[b]] for a, b in pairs], [bool(bad & {a, b}) for a, b in pairs]


def run_table(rng: np.random.Generator, run_id: str, nodes: list[list[str]], profile: Profile,
              slow: np.ndarray, factor: float) -> pa.Table:
    """One simulated run: a row per link, `factor` times slower on the links in `slow`."""
    n = len(nodes)
    level = np.log(100.0) + profile.run_scale * _effect(rng, profile.run_df, n) + np.where(slow, np.log(factor), 0.0)
    logs = level[:, None] + profile.iter_sigma * rng.standard_normal((n, profile.iters))
    return rows_table(run_id, nodes, np.full(n, MSG_BYTES), ["all_reduce"] * n, np.exp(logs), profile)


def _effect(rng: np.random.Generator, df: float | None, n: int) -> np.ndarray:
    return rng.standard_t(df, n) if df else rng.standard_normal(n)


def rows_table(run_id: str, nodes: list[list[str]], msg_bytes: np.ndarray, collectives: list[str],
               times: np.ndarray, profile: Profile, oversub: np.ndarray | float | None = None) -> pa.Table:
    """Result rows of one run as compare reads them: row i is collective `collectives[i]` of
    `msg_bytes[i]` on the link of node IPs `nodes[i]` (local ranks 0 and 1), its iterations
    `times[i]` (us); `oversub`: the contention its ranks measured under (cpu busy 1 / oversub)."""
    n, iters = times.shape
    mean_us = times.mean(axis=1)
    msg_bytes = np.asarray(msg_bytes)
    width = len(nodes[0])
    offsets = pa.array(np.arange(n + 1, dtype=np.int32) * width)
    busy = np.broadcast_to(1.0 / np.asarray(oversub if oversub is not None else np.nan, dtype=float), (n,))
    return pa.table({
        "collective": collectives, "dtype": ["float32"] * n, "op": ["sum"] * n, "in_place": [True] * n,
        "msg_bytes": pa.array(msg_bytes.astype(np.int64)), "topology": [profile.topology] * n,
        "world_size": pa.array(np.full(n, 2, dtype=np.int32)), "ranks_per_node": pa.array(np.ones(n, dtype=np.int32)),
        "pattern": ["sim"] * n, "status": ["ok"] * n, "backend": [profile.backend] * n,
        "busbw_gbps": msg_bytes / mean_us / 1e3, "time_us": mean_us,
        "iter_time_us": pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32) * iters),
                                                 pa.array(times.ravel())),
        "node_ips": pa.ListArray.from_arrays(offsets, pa.array([ip for pair in nodes for ip in pair])),
        "local_ranks": pa.ListArray.from_arrays(offsets, pa.array(np.tile([0, 1], n).astype(np.int32))),
        "run_id": [run_id] * n,
        "cpu_busy_frac": pa.array(busy), "cpu_wait_frac": pa.array(1.0 - busy),
        "load_per_cpu": pa.array(np.full(n, np.nan)), "steal_frac": pa.array(np.full(n, np.nan)),
    })


# A default sweep of this host (`collbench run`): nine collectives, 16 B to 16 MiB by 4x, each call
# ~200 us of latency plus its bytes at ~0.8 GB/s (docs/PERFORMANCE.md section 7), so 16 B .. 64 KiB
# are latency-bound and 256 KiB .. 16 MiB bandwidth-bound.
SWEEP_SIZES = np.array([16 << (2 * k) for k in range(11)])
SWEEP_COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce", "gather",
                     "scatter", "send_recv")
LATENCY_US, RATE_BYTES_US = 200.0, 800.0
# a run's rows are measured at contentions that vary about its median: on this host their
# oversubscription beyond 1 spread with a log sigma of about 1 (quartiles 4.7 and 18.7 about 9.4)
ROW_OVERSUB_SPREAD = 1.0


def sweep_table(rng: np.random.Generator, run_id: str, links: int, profile: Profile,
                oversub: float | None = None, slow: tuple[str, int] | None = None, factor: float = 1.0) -> pa.Table:
    """One simulated default sweep on `links` intra-node links: every collective at every size, a
    run effect per row of the profile's latency or bandwidth scale (as the size is), and a slowdown
    as wide again times the row's contention beyond 1 (judging.contention's measured slope: it only
    ever slows), iterations around it; `slow` =
    (collective, msg_bytes) made `factor` times slower on every link. `oversub`: the run's median
    contention, each row's own varying about it as measured (ROW_OVERSUB_SPREAD; None: not recorded)."""
    from orchestrator.judging.contention import spread_factor

    nodes = [[f"10.1.0.{i}", f"10.1.0.{i}"] for i in range(links)]
    grid = [(link, c, size) for link in range(links) for c in SWEEP_COLLECTIVES for size in SWEEP_SIZES]
    n = len(grid)
    size = np.array([g[2] for g in grid], dtype=float)
    latency = size / RATE_BYTES_US < LATENCY_US
    rows_oversub = None if oversub is None else \
        1 + (oversub - 1) * np.exp(ROW_OVERSUB_SPREAD * rng.standard_normal(n))
    scale, df = np.where(latency, profile.latency_scale, profile.run_scale), (profile.latency_df, profile.run_df)
    effect = scale * np.where(latency, _effect(rng, df[0], n), _effect(rng, df[1], n))
    if rows_oversub is not None:  # contention only slows: a one-sided spread (spread_factor - 1) times as wide
        slow_by = np.abs(np.where(latency, _effect(rng, df[0], n), _effect(rng, df[1], n)))
        effect = effect + scale * (spread_factor(rows_oversub) - 1) * slow_by
    hit = np.array([slow is not None and (c, s) == slow for _, c, s in grid])
    level = np.log(LATENCY_US + size / RATE_BYTES_US) + effect + np.where(hit, np.log(factor), 0.0)
    times = np.exp(level[:, None] + profile.iter_sigma * rng.standard_normal((n, profile.iters)))
    return rows_table(run_id, [nodes[g[0]] for g in grid], size, [g[1] for g in grid], times, profile, rows_oversub)


def false_alarms(profile: str, links: int, baselines: int, trials: int, seed: int,
                 oversub: float | None = None) -> tuple[int, int, int]:
    """(Compares that flagged anything, compares concluded inconclusive, compares) over `trials`
    comparisons of `baselines` healthy default sweeps with another one: the run-level false alarm
    rate of `collbench compare` (exit 1 between two runs of one sweep on an unchanged cluster).
    `oversub`: every run's contention (default: the profile's)."""
    from orchestrator.analysis.compare import Verdict, conclusion

    rng = np.random.default_rng(seed)
    prof = PROFILES[profile]
    oversub = oversub if oversub is not None else prof.oversub
    alarms = inconclusive = 0
    for _ in range(trials):
        base = pa.concat_tables([sweep_table(rng, f"b{k}", links, prof, oversub) for k in range(baselines)])
        new = sweep_table(rng, "new", links, prof, oversub)
        matched, _, _ = compare(base, new, THRESHOLD)
        verdict = conclusion(matched, base, new).verdict
        alarms += verdict is Verdict.DROPPED
        inconclusive += verdict is Verdict.INCONCLUSIVE
    return alarms, inconclusive, trials


def error_rates(profile: str, layout: str, nodes: int, factor: float, baselines: int, trials: int,
                seed: int, culprits: int = 1) -> tuple[float, float, int]:
    """(False-positive rate over healthy links, false-negative rate over slowed links (nan when
    none), links) over `trials` comparisons of `baselines` healthy runs with one run slowed by
    `factor` (1: healthy)."""
    rng = np.random.default_rng(seed)
    prof = PROFILES[profile]
    ips, faulty = _links(layout, nodes, culprits)
    faulty = np.array(faulty) & (factor != 1.0)
    healthy = np.zeros(len(ips), dtype=bool)
    fp = fn = 0
    for t in range(trials):
        base = pa.concat_tables([run_table(rng, f"b{k}", ips, prof, healthy, 1.0) for k in range(baselines)])
        new = run_table(rng, "new", ips, prof, faulty, factor)
        matched, _, _ = compare(base, new, THRESHOLD)
        flagged = np.zeros(len(ips), dtype=bool)
        index = {",".join(f"{ip}:{lr}" for ip, lr in zip(pair, (0, 1))): i for i, pair in enumerate(ips)}
        flagged[[index[link] for link in matched.link[matched.flag]]] = True
        fp += int((flagged & ~faulty).sum())
        fn += int((~flagged & faulty).sum())
    healthy_links = trials * int((~faulty).sum())
    slow_links = trials * int(faulty.sum())
    return fp / healthy_links, (fn / slow_links if slow_links else float("nan")), len(ips)


def report_rates(profile: str, groups: int, factor: float, trials: int, seed: int, culprits: int = 1
                 ) -> tuple[float, float]:
    """The report's peer flags (analysis.diagnosis.shape_scores and its slow rule, the code `collbench
    report` runs): one run of `groups` groups of one shape, each group's busbw spread about the
    shape's level by the profile's run effect, `culprits` of them `factor` times slower. (False-
    positive rate over healthy groups, false-negative rate over slowed ones.)"""
    from orchestrator.analysis.diagnosis import _slow, shape_scores

    rng = np.random.default_rng(seed)
    prof = PROFILES[profile]
    slow = np.zeros(groups, dtype=bool)
    if factor != 1.0:
        slow[[(groups // 2 + k) % groups for k in range(min(culprits, groups))]] = True
    fp = fn = 0
    for _ in range(trials):
        effect = rng.standard_t(prof.run_df, groups) if prof.run_df else rng.standard_normal(groups)
        busbw = 10.0 * np.exp(-prof.run_scale * effect) / np.where(slow, factor, 1.0)
        rows = pd.DataFrame({"status": "ok", "msg_bytes": MSG_BYTES, "collective": "all_reduce", "dtype": "float32",
                             "op": "sum", "in_place": True, "pattern": "sim", "world_size": 2, "ranks_per_node": 1,
                             "group": np.arange(groups), "busbw_gbps": busbw,
                             "backend": prof.backend, "topology": prof.topology})
        flagged = np.zeros(groups, dtype=bool)
        flagged[_slow(shape_scores(rows), 0.10).index.to_numpy()] = True
        fp += int((flagged & ~slow).sum())
        fn += int((~flagged & slow).sum())
    healthy, bad = trials * int((~slow).sum()), trials * int(slow.sum())
    return fp / healthy, (fn / bad if bad else float("nan"))


SHAPES = (2, 3, 4, 6, 8, 16, 64, 256)  # links of one shape (issue 32's grid)
DROPS = (1.25, 2.0, 4.0, 10.0, 50.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--healthy-links", type=int, default=600, help="healthy links judged per cell (false positives)")
    ap.add_argument("--slow-trials", type=int, default=60, help="comparisons per cell with a planted drop")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profiles", default="host,lab,gpu", help="noise profiles of the per-link tables, comma-separated "
                    "(alarms: every cell of ALARM_CELLS)")
    ap.add_argument("--consumer", choices=("compare", "report", "alarms"), default="compare",
                    help="compare (a run against baseline runs; watch's drift is the same code), the report's "
                    "peer flags (each group against the others of its run), or alarms: compare's run-level false "
                    "alarm rate (default sweeps of an unchanged cluster compared whole)")
    ap.add_argument("--compares", type=int, default=100, help="alarms: compares per cell")
    args = ap.parse_args()
    if args.consumer == "report":
        return report_table(args)
    if args.consumer == "alarms":
        return alarms_table(args)
    print("| noise | links | baseline runs | false positives | " + " | ".join(
        f"missed {f:g}x (1 / 2 culprits)" for f in DROPS) + " |")
    print("|---|---|---|---|" + "---|" * len(DROPS))
    started = time.monotonic()
    for profile in args.profiles.split(","):
        for links in SHAPES:
            for baselines in (1, 3):
                trials = max(5, args.healthy_links // links)
                fp, _, _ = error_rates(profile, "links", links, 1.0, baselines, trials, args.seed)
                cells = []
                for factor in DROPS:
                    misses = []
                    for culprits in (1, 2) if links >= 3 else (1,):
                        fn = error_rates(profile, "links", links, factor, baselines,
                                         max(3, args.slow_trials * 4 // max(links, 4)), args.seed + 1, culprits)[1]
                        misses.append(f"{fn:.0%}")
                    cells.append(" / ".join(misses))
                print(f"| {profile} | {links} | {baselines} | {fp:.2%} | " + " | ".join(cells) + " |", flush=True)
    print(f"\n{time.monotonic() - started:.0f} s")


# (profile, contention of every run: None where the rows do not record it): this host quiet and
# with a core taken (1.5x: a busy loop beside two ranks on two cores)
ALARM_CELLS = (("host", None), ("shared", 1.0), ("shared", 1.5), ("lab", None), ("gpu", None))


def alarms_table(args: argparse.Namespace) -> None:
    """Run-level false alarms: compares of a default sweep with one or three earlier ones of an
    unchanged cluster that exit 1 (flag anything), and that conclude inconclusive, per profile."""
    print("| noise | contention | links | baseline runs | false alarms (exit 1) | inconclusive |")
    print("|---|---|---|---|---|---|")
    started = time.monotonic()
    for profile, oversub in ALARM_CELLS:
        for links in (1, 4):
            for baselines in (1, 3):
                alarms, inconclusive, n = false_alarms(profile, links, baselines, args.compares, args.seed, oversub)
                said = "not recorded" if oversub is None else f"{oversub:g}x"
                print(f"| {profile} | {said} | {links} | {baselines} | {alarms} of {n} | {inconclusive} of {n} |",
                      flush=True)
    print(f"\n{time.monotonic() - started:.0f} s")


def report_table(args: argparse.Namespace) -> None:
    print("| noise | groups | false positives | " + " | ".join(f"missed {f:g}x (1 / 2 culprits)" for f in DROPS) + " |")
    print("|---|---|---|" + "---|" * len(DROPS))
    started = time.monotonic()
    for profile in args.profiles.split(","):
        for groups in SHAPES:
            fp, _ = report_rates(profile, groups, 1.0, max(20, 20 * args.healthy_links // groups), args.seed)
            cells = []
            for factor in DROPS:
                misses = [f"{report_rates(profile, groups, factor, max(50, 4 * args.slow_trials), args.seed + 1, c)[1]:.0%}"
                          for c in ((1, 2) if groups >= 3 else (1,))]
                cells.append(" / ".join(misses))
            print(f"| {profile} | {groups} | {fp:.2%} | " + " | ".join(cells) + " |", flush=True)
    print(f"\n{time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
