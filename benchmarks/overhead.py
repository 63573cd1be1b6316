"""Orchestration overhead: a default multi-pattern sweep on a lab cluster, wall time versus the
time spent inside timed collectives, time to the first row, per-group set-up and tear-down.

    python benchmarks/overhead.py [--nodes 2 --ranks-per-node 2 --link 1gbit]   (root)
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from orchestrator.lab import cluster as labmod  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--ranks-per-node", type=int, default=2)
    p.add_argument("--link", default="1gbit")
    p.add_argument("extra", nargs="*", help="more `collbench run` options, after --")
    a = p.parse_args()
    st = labmod.up("ovh", a.nodes, a.ranks_per_node, a.link, "10.217.0.0/24")
    try:
        out = tempfile.mkdtemp(prefix="cbovh")
        cmd = [sys.executable, "-m", "orchestrator", "run", "--address", st.address, "--ranks-per-node",
               str(a.ranks_per_node), "--patterns", "intra,inter,mixed,pairwise", "--output", out, *a.extra]
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **st.auth_env()})
        summary = [ln for ln in proc.stdout.splitlines() if ln.startswith("collbench:")]
        print("\n".join(summary))
        m = re.search(r"wall ([\d.]+)s, measuring ([\d.]+)s", proc.stdout)
        if m:
            wall, measured = map(float, m.groups())
            print(f"measuring share: {measured / wall:.0%} of {wall:.1f}s; the rest: Ray connection and actor start, "
                  f"group formation, warm-up and check iterations, Python between calls")
    finally:
        labmod.down(st)


if __name__ == "__main__":
    main()
