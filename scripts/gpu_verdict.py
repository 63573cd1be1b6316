"""One verdict line for a GPU check's results: PASS or FAIL, with the figures it rests on.

    python scripts/gpu_verdict.py RESULTS_DIR        (exit 0 on PASS, 1 on FAIL)

RESULTS_DIR holds the check's runs (scripts/gpu_check.sh: a sweep of every collective and dtype
with the overlap workload, and a --cuda-graph run). Checks, on every row of every run:
- exact and ok; NCCL's own log read (its version on every row); the transport columns: with two
  or more GPUs the intra-node path on every row of a group of two or more, and on one node no
  inter-node path;
- the memory each size took (`mem_peak_bytes`, torch's peak on the GPU) within its estimate
  (`mem_estimate_bytes`, what the run's memory checks use);
- `time_us_batch` (nccl-tests' timing) no slower than `time_us` (per-call events) from 1 MiB,
  and above the empty-call floor (`batch_floor_us` of the run's manifest);
- float8 measured where the GPU has compute capability 9.0 or newer; the overlap workload
  measured; the --cuda-graph run's rows ok;
- on a known 8-GPU part whose GPUs NCCL connected over NVLink, all_reduce busbw at the largest
  size (>= 256 MiB) above the part's floor.
"""

from __future__ import annotations

import json
import sys

import pandas as pd

# all_reduce busbw floors (GB/s) of 8-GPU NVLink nodes at >= 256 MiB, a margin under what the parts
# reach (README: Expected values): H100/H200 SXM ~360-370 ring, A100 SXM ~230, B200 ~700. Applied
# only where every multi-GPU row's intra-node path is NVLink (PCIe cards share the names).
FLOORS_8GPU = {"H100": 300.0, "H200": 300.0, "A100": 180.0, "B200": 550.0}
MIN_BYTES = 256 << 20
BATCH_FROM_BYTES = 1 << 20  # from here a call is long enough that per-call events cost nothing
BATCH_SLACK = 1.10  # a batch may read up to 10% above per-call timing (noise), never more
MEMORY_SLACK_BYTES = 2 << 20  # torch's allocator rounds each block up (to 2 MiB segments for large ones)


def verdict(df: pd.DataFrame, manifests: dict[str, dict] | None = None,
            compute_capability: tuple[int, int] | None = None) -> tuple[bool, str]:
    manifests = manifests or {}
    problems, facts = [], []
    n = int(df.world_size.max())
    model = df.gpu_model.dropna().iloc[0] if df.gpu_model.notna().any() else "unknown GPU"
    facts.append(f"{n} x {model}")
    bad = df[(df.status != "ok") | (df.n_wrong > 0)]
    if len(bad):
        problems.append(f"{len(bad)} row(s) not ok or not exact")
    ok = df[df.status == "ok"]
    versions = sorted(set(df.nccl_version.dropna()))
    facts.append(f"NCCL {','.join(versions) or '?'}")
    if df.nccl_version.isna().any():
        problems.append("NCCL's log was not read on every row")
    _transports(df, n, facts, problems)
    _memory(ok, facts, problems)
    _timing(ok, manifests, facts, problems)
    _coverage(ok, manifests, compute_capability, facts, problems)
    _floor(ok, n, model, facts, problems)
    passed = not problems
    return passed, f"collbench GPU check: {'PASS' if passed else 'FAIL'} | " + " | ".join(facts + problems)


def _transports(df: pd.DataFrame, n: int, facts: list[str], problems: list[str]) -> None:
    if df.n_nodes.max() == 1 and "net_transport" in df and df.net_transport.notna().any():
        problems.append(f"one node, yet {int(df.net_transport.notna().sum())} row(s) name an inter-node path")
    if n < 2:
        return
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


def _memory(ok: pd.DataFrame, facts: list[str], problems: list[str]) -> None:
    measured = ok.dropna(subset=["mem_peak_bytes", "mem_estimate_bytes"]) if "mem_peak_bytes" in ok else ok[:0]
    if measured.empty:
        problems.append("no row measured its GPU memory (mem_peak_bytes)")
        return
    over = measured[measured.mem_peak_bytes > measured.mem_estimate_bytes + MEMORY_SLACK_BYTES]
    big = measured[measured.mem_estimate_bytes >= 64 << 20]
    ratio = float((big.mem_peak_bytes / big.mem_estimate_bytes).max()) if len(big) else float("nan")
    facts.append(f"memory peak/estimate <= {ratio:.2f} from 64M")
    if len(over):
        worst = over.assign(excess=over.mem_peak_bytes - over.mem_estimate_bytes).sort_values("excess").iloc[-1]
        problems.append(f"{len(over)} row(s) took more GPU memory than estimated (worst {worst['collective']} "
                        f"{worst['dtype']} {int(worst['msg_bytes'])} B: {int(worst['mem_peak_bytes'])} > "
                        f"{int(worst['mem_estimate_bytes'])} bytes)")


def _timing(ok: pd.DataFrame, manifests: dict[str, dict], facts: list[str], problems: list[str]) -> None:
    timed = ok.dropna(subset=["time_us_batch", "time_us"])
    large = timed[timed.msg_bytes >= BATCH_FROM_BYTES]
    if len(large):
        slow = large[large.time_us_batch > BATCH_SLACK * large.time_us]
        facts.append(f"batch/per-call time from 1M: median {float((large.time_us_batch / large.time_us).median()):.2f}")
        if len(slow):
            problems.append(f"{len(slow)} row(s) from 1M whose batch time exceeds {BATCH_SLACK:.2f}x the per-call time")
    small = timed[timed.msg_bytes < 64 << 10]
    if len(small):
        facts.append(f"below 64K: batch {float(small.time_us_batch.median()):.1f} us, per-call "
                     f"{float(small.time_us.median()):.1f} us (median)")
    floors = {r: m.get("batch_floor_us") for r, m in manifests.items()}
    known = [f for f in floors.values() if f is not None]
    if not known:
        problems.append("no empty-call floor (batch_floor_us) in the runs' manifests")
        return
    facts.append(f"empty-call floor {max(known):.2f} us")
    for run_id, floor in floors.items():
        rows = timed[timed.run_id == run_id]
        if floor is not None and len(rows) and float(rows.time_us_batch.min()) <= floor:
            problems.append(f"run {run_id}: a batch time at or below the empty-call floor {floor:.2f} us")


def _coverage(ok: pd.DataFrame, manifests: dict[str, dict], cc: tuple[int, int] | None, facts: list[str],
              problems: list[str]) -> None:
    dtypes = sorted(set(ok.dtype))
    facts.append(f"{len(set(ok.collective) - {'overlap'})} collectives x {len(dtypes)} dtypes")
    if cc is not None and cc >= (9, 0) and not {"float8_e4m3", "float8_e5m2"} <= set(dtypes):
        problems.append(f"compute capability {cc[0]}.{cc[1]} and no float8 rows")
    overlap = ok[ok.collective == "overlap"]
    if overlap.empty or overlap.t_step_us.isna().all():
        problems.append("the overlap workload was not measured")
    else:
        facts.append(f"overlap efficiency {float(overlap.overlap_efficiency.median()):.0%}")
    graphs = [r for r, m in manifests.items() if json.loads(m.get("spec") or "{}").get("cuda_graph")]
    if not graphs:
        problems.append("no --cuda-graph run")
    elif not len(ok[ok.run_id.isin(graphs)]):
        problems.append("the --cuda-graph run has no ok row")
    else:
        facts.append(f"cuda-graph rows {len(ok[ok.run_id.isin(graphs)])}")


def _floor(ok: pd.DataFrame, n: int, model: str, facts: list[str], problems: list[str]) -> None:
    ar = ok[(ok.collective == "all_reduce") & (ok.world_size == n) & (ok.msg_bytes >= MIN_BYTES)]
    part = next((p for p in FLOORS_8GPU if p in model), None)
    multi = ok[ok.world_size >= 2].intra_transport.dropna()
    nvlink = len(multi) and multi.str.contains("NVL").all() and not multi.str.contains("PIX|PXB|PHB|SYS|SHM").any()
    if n == 8 and part and nvlink and len(ar):
        big = ar[ar.msg_bytes == ar.msg_bytes.max()]
        bw, floor = float(big.busbw_gbps.max()), FLOORS_8GPU[part]
        facts.append(f"all_reduce {int(big.msg_bytes.iloc[0]) >> 20}M busbw {bw:.1f} GB/s (floor {floor:g})")
        if bw < floor:
            problems.append(f"all_reduce busbw {bw:.1f} GB/s below the {part} floor {floor:g}")
    elif n >= 2 and len(ar):
        facts.append(f"all_reduce busbw {float(ar.busbw_gbps.max()):.1f} GB/s (no floor for this part/count/path)")


def main() -> int:
    from orchestrator.results import dataset

    path = sys.argv[1]
    df = dataset.load(path, latest=False)
    manifests = {r: dataset.manifest(path, r) or {} for r in sorted(set(df.run_id))}
    cc = None
    try:
        import torch

        if torch.cuda.is_available():
            cc = min(torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count()))
    except ImportError:
        pass
    ok, line = verdict(df, manifests, cc)
    print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
