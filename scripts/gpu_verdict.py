"""One verdict line for a GPU check's results: PASS or FAIL, with the figures it rests on.

    python scripts/gpu_verdict.py RESULTS_DIR        (exit 0 on PASS, 1 on FAIL)

Checks: every row ok and exact; NCCL's own log read (version on every row; with two or more GPUs
the intra-node path named on every row of a group of two or more); and for a known part with 8 GPUs,
all_reduce busbw at the largest size of at least 256 MiB above the part's floor.
"""

from __future__ import annotations

import sys

import pandas as pd

# all_reduce busbw floors (GB/s) of 8-GPU nodes at >= 256 MiB, a margin under what the parts
# reach (README: Expected values): H100/H200 SXM ~360-370 ring, A100 SXM ~230, B200 ~700.
FLOORS_8GPU = {"H100": 300.0, "H200": 300.0, "A100": 180.0, "B200": 550.0}
MIN_BYTES = 256 << 20


def verdict(df: pd.DataFrame) -> tuple[bool, str]:
    problems, facts = [], []
    n = int(df.world_size.max())
    model = df.gpu_model.dropna().iloc[0] if df.gpu_model.notna().any() else "unknown GPU"
    facts.append(f"{n} x {model}")
    bad = df[(df.status != "ok") | (df.n_wrong > 0)]
    if len(bad):
        problems.append(f"{len(bad)} row(s) not ok or not exact")
    versions = sorted(set(df.nccl_version.dropna()))
    facts.append(f"NCCL {','.join(versions) or '?'}")
    if df.nccl_version.isna().any():
        problems.append("NCCL's log was not read on every row")
    if n >= 2:
        multi = df[df.world_size >= 2]
        paths = sorted(set(multi.intra_transport.dropna()))
        facts.append(f"intra {','.join(paths) or '?'}")
        if not paths:
            problems.append("no intra-node path in NCCL's log")
        elif multi.intra_transport.isna().any():
            # every group of two or more GPUs connects peers; a later group of a worker reads its own lines
            sizes = ",".join(map(str, sorted(set(multi[multi.intra_transport.isna()].world_size))))
            problems.append(f"{int(multi.intra_transport.isna().sum())} row(s) of {sizes}-GPU groups name no "
                            "intra-node path")
    ar = df[(df.collective == "all_reduce") & (df.world_size == n) & (df.status == "ok") & (df.msg_bytes >= MIN_BYTES)]
    part = next((p for p in FLOORS_8GPU if p in model), None)
    if n == 8 and part and len(ar):
        big = ar[ar.msg_bytes == ar.msg_bytes.max()]
        bw, floor = float(big.busbw_gbps.max()), FLOORS_8GPU[part]
        facts.append(f"all_reduce {int(big.msg_bytes.iloc[0]) >> 20}M busbw {bw:.1f} GB/s (floor {floor:g})")
        if bw < floor:
            problems.append(f"all_reduce busbw {bw:.1f} GB/s below the {part} floor {floor:g}")
    elif n >= 2 and len(ar):
        facts.append(f"all_reduce busbw {float(ar.busbw_gbps.max()):.1f} GB/s (no floor for this part/count)")
    ok = not problems
    return ok, f"collbench GPU check: {'PASS' if ok else 'FAIL'} | " + " | ".join(facts + problems)


def main() -> int:
    ok, line = verdict(pd.read_parquet(sys.argv[1]))
    print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
