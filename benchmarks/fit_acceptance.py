"""How often the fit rule (orchestrator.analysis.fits) accepts what it should and what it should
not: the 4-size, 5-iteration all_reduce sweeps measured on this host (docs/PERFORMANCE.md
section 10), and models that are wrong, drawn with the spread a noisy host shows.

    python benchmarks/fit_acceptance.py [--draws 2000] [--seed 0] [--measure 3]

--measure N runs the sweep N times on the embedded Ray instance here (all_reduce, 2 ranks, 256K
to 16M by 4, 5 iterations) and says which fits `collbench report` accepts.

Wrong models, over 4, 6 and 8 sizes a factor 4 apart from 256K, each size's time multiplied by a
noise factor uniform in [1 - n, 1 + n] and given the spread s:
- random: times uniform in [10, 1000] us, unrelated to size;
- cliff: flat at 100 us, then x100 at the largest size;
- quadratic: time proportional to bytes squared (superlinear: no alpha-beta line holds);
and a right model (alpha 100 us, 1 GB/s) with the same noise, which should be accepted. The rule
is the report's and predict's (fits.robust_fit: one delayed size, not the largest, may be left out).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from orchestrator.analysis.fits import robust_fit  # noqa: E402

# The nine 4-size, 5-iteration sweeps measured on this host on 2026-12-01 (all_reduce, 2 ranks, 256K to
# 16M by 4): each size's median iteration (us) and its iterations' spread (p99 over min, less one).
HOST = [([415, 796, 4232, 32464], [1.34, 3.16, 1.0, 1.06]),
        ([487, 770, 6809, 15575], [1.38, 0.97, 1.22, 1.26]),
        ([541, 1112, 3664, 18358], [1.7, 3.86, 1.44, 1.13]),
        ([2353, 3605, 7649, 14991], [7.78, 7.49, 1.24, 0.17]),
        ([1524, 2312, 5455, 11605], [1.52, 4.12, 1.13, 0.38]),
        ([1244, 994, 4355, 19167], [3.64, 2.58, 0.77, 0.34]),
        ([4988, 953, 4418, 17175], [1.52, 5.14, 1.33, 0.59]),
        ([502, 900, 3879, 16030], [3.58, 3.14, 1.29, 1.51]),
        ([4212, 1466, 4326, 17090], [1.72, 3.08, 3.29, 0.43])]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--draws", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--measure", type=int, default=0, metavar="N", help="run the sweep N times here and fit it")
    a = p.parse_args()
    for i in range(a.measure):
        out = tempfile.mkdtemp(prefix="cbfit")
        subprocess.run([sys.executable, "-m", "orchestrator", "run", "--collectives", "all_reduce",
                        "--patterns", "intra",
                        "-b", "256K", "-e", "16M", "-f", "4", "-n", "5", "--output", out, "--no-doctor"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rep = subprocess.run([sys.executable, "-m", "orchestrator", "report", out, "--table", "fits",
                              "--format", "json"],
                             capture_output=True, text=True)
        for f in json.loads(rep.stdout)["tables"]["fits"]:
            print(f"measured sweep {i + 1}: {f['collective']} {f['topology']} world {f['world_size']}: {f['quality']} "
                  f"(median size off by {f.get('median_rel_err', 0) or 0:.0%}, worst {f['max_rel_err']:.0%})")
    rng = np.random.default_rng(a.seed)
    x4 = np.array([256 << 10, 1 << 20, 4 << 20, 16 << 20], dtype=float)
    accepted = sum(not robust_fit(x4, np.array(t, float), np.array(s)).poor for t, s in HOST)
    print(f"this host's sweeps accepted: {accepted} of {len(HOST)}")
    models = {
        "right (alpha-beta)": lambda x: 100.0 + x / 1e3,
        "random": lambda x: rng.uniform(10, 1000, len(x)),
        "cliff": lambda x: np.where(x < x.max(), 100.0, 10_000.0),
        "quadratic": lambda x: 100.0 * (x / x[0]) ** 2,
    }
    print(f"{'model':<20} {'sizes':>5} {'noise':>6} {'spread':>6} {'accepted':>9}")
    for name, model in models.items():
        for n_sizes in (4, 6, 8):
            x = np.array([(256 << 10) * 4**i for i in range(n_sizes)], dtype=float)
            for noise, spread in ((0.05, 0.1), (0.3, 1.0)):
                ok = 0
                for _ in range(a.draws):
                    y = model(x) * rng.uniform(1 - noise, 1 + noise, n_sizes)
                    ok += not robust_fit(x, y, np.full(n_sizes, spread)).poor
                print(f"{name:<20} {n_sizes:>5} {noise:>6.2f} {spread:>6.2f} {ok / a.draws:>9.1%}")


if __name__ == "__main__":
    main()
