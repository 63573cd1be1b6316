"""One verdict line for a GPU check's results: PASS or FAIL, with the figures it rests on.

    python scripts/gpu_verdict.py RESULTS_DIR [--no-gpu]       (exit 0 on PASS, 1 on FAIL)

RESULTS_DIR holds the check's runs (scripts/gpu_check.sh: a sweep of every collective and dtype
with the overlap workload, and a --cuda-graph run). Checks, on every row of every run:
- exact and ok; NCCL's own log read (its version on every row; its git hash, plugins, CTA policy
  and registered buffers printed where a row has them); the transport columns: with two
  or more GPUs the intra-node path on every row of a group of two or more, and on one node no
  inter-node path;
- the memory each size took (`mem_peak_bytes`, torch's peak on the GPU) within its estimate
  (`mem_estimate_bytes`, what the run's memory checks use);
- `time_us_batch` (nccl-tests' timing) no slower than `time_us` (per-call events) from 1 MiB,
  and above the empty-call floor (`batch_floor_us` of the run's manifest);
- float8 measured where the GPU has compute capability 9.0 or newer; the overlap workload
  measured; the --cuda-graph run's rows ok;
- on a known 8-GPU part whose GPUs NCCL connected over NVLink, all_reduce busbw at the largest
  size (>= 256 MiB) above the part's floor;
- on one GPU, the largest out-of-place all_gather (one rank: a device-to-device copy) timed by
  collbench's CUDA events against torch's own events around the same copy.
A check is made only where it can be: with one rank NCCL puts no work on the GPU for in-place
calls (enqueue.cc, onerank.cu: out of place it copies, in place it does nothing), so those, the
float8 reductions, overlap, a CUDA graph of them, batch against per-call time, and NCCL's facts
merged across a worker's groups are printed as `not exercised (1 rank)`, each on its own line;
with --no-gpu (the rehearsal on gloo) every GPU-only check is printed as `not run (no GPU)`. The
verdict passes on what ran.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd

# collbench from this tree, never a copy installed from a bundle built before the last change
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.judging.defaults import DISPATCH_BOUND  # noqa: E402

# all_reduce busbw floors (GB/s) of 8-GPU NVLink nodes at >= 256 MiB, a margin under what the parts
# reach (docs/guides/expected.md): H100/H200 SXM ~360-370 ring, A100 SXM ~230, B200 ~700. Applied
# only where every multi-GPU row's intra-node path is NVLink (PCIe cards share the names).
FLOORS_8GPU = {"H100": 300.0, "H200": 300.0, "A100": 180.0, "B200": 550.0}
MIN_BYTES = 256 << 20
# the build NCCL ran with, as its log said it (printed only where some row has it)
BUILD = (("nccl_git_hash", "git"), ("nccl_net_plugin", "net plugin"), ("nccl_tuner_plugin", "tuner"),
         ("nccl_profiler_plugin", "profiler"), ("nccl_cta_policy", "CTA policy"),
         ("nccl_buffers_registered", "registered"))
BATCH_FROM_BYTES = 1 << 20  # from here a call is long enough that per-call events cost nothing
BATCH_SLACK = 1.10  # a batch may read up to 10% above per-call timing (noise), never more
MEMORY_SLACK_BYTES = 2 << 20  # torch's allocator rounds each block up (to 2 MiB segments for large ones)
COPY_FROM_BYTES = 64 << 20  # a copy this long is timed by events to well within COPY_RATIO
COPY_RATIO = (0.67, 1.5)  # collbench's time of a one-rank all_gather against torch's copy of its bytes

NOT_ON_ONE_RANK = (
    "in-place all_reduce, broadcast and reduce (and every in-place row: NCCL does nothing in place on one rank)",
    "float8 reductions (one rank reduces nothing; float8 buffers are built, copied and checked)",
    "the overlap workload (nothing to overlap)",
    "a CUDA graph of the collectives (its captured calls are empty in place)",
    "batch against per-call time (both time a launch, not a transfer)",
    "NCCL's once-per-process facts merged across a worker's groups (one group per worker)",
    "the intra-node path and the 8-GPU NVLink busbw floor (no peer)",
)
NOT_WITHOUT_GPU = (
    "NCCL's log (version, intra- and inter-node paths)",
    "GPU memory peak against its estimate",
    "batch against per-call time and the empty-call floor",
    "float8 on compute capability 9.0+",
    "a CUDA graph of the collectives",
    "the 8-GPU NVLink busbw floor",
    "CUDA-event timing of a device copy against torch's own",
)


# NCCL's own telemetry (issue 34) that a passing sweep does not exercise, whatever the GPU count
NOT_BY_A_PASSING_SWEEP = (
    "NCCL RAS in a hang's verdict (asked only when a group passes its deadline, with NCCL_RAS_ADDR set off loopback)",
    "the NCCL Inspector's columns (the check does not load the plugin)",
)
DIAGNOSTICS_FROM = (2, 31)  # NCCL_RUN_DIAGNOSTICS, NCCL_RUN_RAS_DIAGNOSTICS


def not_checked(n: int, gpu: bool, nccl_version: str | None = None) -> list[str]:
    """What the rows cannot show, one line each (printed under the verdict line)."""
    if not gpu:
        return [f"not run (no GPU): {what}" for what in NOT_WITHOUT_GPU]
    lines = [f"not exercised (1 rank): {what}" for what in NOT_ON_ONE_RANK] if n < 2 else []
    if n < 2:
        lines.append("not exercised (1 rank): a straggler by arrival (a rank whose launches come late)")
    lines += [f"not exercised: {what}" for what in NOT_BY_A_PASSING_SWEEP]
    version = tuple(int(x) for x in (nccl_version or "").split(".")[:2] if x.isdigit())
    if len(version) == 2 and version < DIAGNOSTICS_FROM:
        lines.append(f"not run (NCCL {nccl_version} below 2.31): NCCL's own diagnostics")
    else:
        lines.append("not exercised: NCCL's own diagnostics (the check does not set NCCL_RUN_DIAGNOSTICS)")
    return lines


def verdict(df: pd.DataFrame, manifests: dict[str, dict] | None = None,
            compute_capability: tuple[int, int] | None = None, gpu: bool = True,
            copy_us: Callable[[int], float] | None = None) -> tuple[bool, str]:
    """(PASS, the line) on what the rows can show (`not_checked` lists the rest). `copy_us(nbytes)`:
    torch's own event time of a device copy of that many bytes (one GPU)."""
    manifests = manifests or {}
    problems, facts = [], []
    n = int(df.world_size.max())
    model = df.gpu_model.dropna().iloc[0] if "gpu_model" in df and df.gpu_model.notna().any() else "unknown GPU"
    facts.append(f"{n} x {model}" if gpu else f"{n} CPU ranks (rehearsal, no GPU)")
    bad = df[(df.status != "ok") | (df.n_wrong > 0)]
    if len(bad):
        problems.append(f"{len(bad)} row(s) not ok or not exact")
    ok = df[df.status == "ok"]
    if gpu:
        versions = sorted(set(df.nccl_version.dropna()))
        facts.append(f"NCCL library {','.join(versions) or '?'} (loaded; its log's banner)")
        if df.nccl_version.isna().any():
            problems.append("NCCL's log was not read on every row")
        facts += [f"NCCL {label} {','.join(sorted(set(df[c].dropna())))}" for c, label in BUILD
                  if c in df and df[c].notna().any()]
        _transports(df, n, facts, problems)
        _memory(ok, facts, problems)
        # one rank: in place NCCL launches nothing, so only out-of-place rows time a transfer
        _timing(ok if n >= 2 else _out_of_place(ok), manifests, facts, problems, batch_against_call=n >= 2)
    _coverage(ok, manifests, compute_capability if gpu else None, facts, problems, n, gpu)
    if gpu and n >= 2:
        _floor(ok, n, model, facts, problems)
    if gpu and n == 1 and copy_us is not None:
        _copy_timing(ok, copy_us, facts, problems)
    passed = not problems
    return passed, f"collbench GPU check: {'PASS' if passed else 'FAIL'} | " + " | ".join(facts + problems)


def _out_of_place(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[~rows.in_place.astype(bool)] if "in_place" in rows else rows


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


def _timing(ok: pd.DataFrame, manifests: dict[str, dict], facts: list[str], problems: list[str],
            batch_against_call: bool = True) -> None:
    timed = ok.dropna(subset=["time_us_batch", "time_us"])
    large = timed[timed.msg_bytes >= BATCH_FROM_BYTES]
    if len(large) and batch_against_call:
        slow = large[large.time_us_batch > BATCH_SLACK * large.time_us]
        facts.append(f"batch/per-call time from 1M: median {float((large.time_us_batch / large.time_us).median()):.2f}")
        if len(slow):
            problems.append(f"{len(slow)} row(s) from 1M whose batch time exceeds {BATCH_SLACK:.2f}x the per-call time")
    small = timed[timed.msg_bytes < 64 << 10]
    if len(small) and batch_against_call:
        facts.append(f"below 64K: batch {float(small.time_us_batch.median()):.1f} us, per-call "
                     f"{float(small.time_us.median()):.1f} us (median)")
    dispatch = [f for m in manifests.values() if (f := m.get("dispatch_floor_us"))]
    if dispatch:  # c10d's own cost of a call, measured by each worker (docs/concepts/bandwidth.md)
        within = int(timed.dispatch_bound.fillna(False).astype(bool).sum()) if "dispatch_bound" in timed else 0
        facts.append(f"dispatch floor {max(dispatch):.1f} us ({within} of {len(timed)} rows within "
                     f"{DISPATCH_BOUND:g}x)")
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
              problems: list[str], n: int, gpu: bool) -> None:
    dtypes = sorted(set(ok.dtype))
    collectives = set(ok.collective) - {"overlap"}
    if gpu and n < 2:
        facts.append(_one_rank_work(ok))
    else:
        facts.append(f"{len(collectives)} collectives x {len(dtypes)} dtypes")
    if cc is not None and cc >= (9, 0) and not {"float8_e4m3", "float8_e5m2"} <= set(dtypes):
        problems.append(f"compute capability {cc[0]}.{cc[1]} and no float8 rows")
    if n < 2:
        return  # overlap and CUDA graphs: not exercised on one rank (not_checked)
    overlap = ok[ok.collective == "overlap"]
    if overlap.empty or overlap.t_step_us.isna().all():
        problems.append("the overlap workload was not measured")
    else:
        facts.append(f"overlap efficiency {float(overlap.overlap_efficiency.median()):.0%}")
    if not gpu:
        return
    graphs = [r for r, m in manifests.items() if json.loads(m.get("spec") or "{}").get("cuda_graph")]
    if not graphs:
        problems.append("no --cuda-graph run")
    elif not len(ok[ok.run_id.isin(graphs)]):
        problems.append("the --cuda-graph run has no ok row")
    else:
        facts.append(f"cuda-graph rows {len(ok[ok.run_id.isin(graphs)])}")


def _one_rank_work(ok: pd.DataFrame) -> str:
    """Which collectives put work on the GPU on one rank: NCCL hands a one-rank call to
    ncclLaunchOneRank (enqueue.cc), which copies out of place and launches nothing in place
    (onerank.cu: dst == src returns; a premultiplied sum, `avg`, launches a kernel even in place);
    all_to_all goes the same way (or to a send/recv to itself: a copy in NCCL's kernel)."""
    collectives = set(ok.collective) - {"overlap"}
    work = _out_of_place(ok)
    work = work[work.collective.isin(collectives)]
    worked, idle = sorted(set(work.collective)), sorted(collectives - set(work.collective))
    line = f"GPU work on 1 rank: {len(worked)} collectives x {work.dtype.nunique()} dtypes ({', '.join(worked) or 'none'}: " \
           "out of place, a device copy)"
    return line + (f", none from {', '.join(idle)} (in place only: NCCL launches nothing)" if idle else "")


def _copy_timing(ok: pd.DataFrame, copy_us: Callable[[int], float], facts: list[str], problems: list[str]) -> None:
    """One rank's out-of-place all_gather is a device copy of msg_bytes: collbench's per-call CUDA
    events against torch's own events around the same copy."""
    rows = _out_of_place(ok[(ok.collective == "all_gather") & (ok.world_size == 1) & (ok.msg_bytes >= COPY_FROM_BYTES)])
    if rows.empty:
        problems.append(f"no one-rank out-of-place all_gather of {COPY_FROM_BYTES >> 20}M or more to time against "
                        "torch's copy")
        return
    row = rows.sort_values("msg_bytes").iloc[-1]
    nbytes = int(row.msg_bytes)
    theirs = copy_us(nbytes)
    ratio = float(row.time_us) / theirs
    facts.append(f"all_gather {nbytes >> 20}M on 1 rank (a device copy) {float(row.time_us):.1f} us, torch's copy "
                 f"{theirs:.1f} us (x{ratio:.2f})")
    if not COPY_RATIO[0] <= ratio <= COPY_RATIO[1]:
        problems.append(f"one-rank all_gather time x{ratio:.2f} of torch's copy of the same bytes (allowed "
                        f"{COPY_RATIO[0]}-{COPY_RATIO[1]})")


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


def torch_copy_us(nbytes: int) -> float:
    """Median of 20 device-to-device copies of `nbytes`, each between two CUDA events (torch's own)."""
    import statistics

    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def main(argv: list[str]) -> int:
    from orchestrator.results import dataset

    if not argv or any(a.startswith("-") and a != "--no-gpu" for a in argv):
        print("usage: gpu_verdict.py RESULTS_DIR [--no-gpu]", file=sys.stderr)
        return 2
    path, gpu = argv[0], "--no-gpu" not in argv
    df = dataset.load(path, latest=False)
    manifests = {r: dataset.manifest(path, r) or {} for r in sorted(set(df.run_id))}
    cc, copy_us = None, None
    if gpu:
        import torch

        if torch.cuda.is_available():
            cc = min(torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count()))
            copy_us = torch_copy_us
    ok, line = verdict(df, manifests, cc, gpu, copy_us)
    print(line)
    versions = sorted(set(df.nccl_version.dropna())) if "nccl_version" in df else []
    for what in not_checked(int(df.world_size.max()), gpu, versions[0] if versions else None):
        print(f"  {what}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
