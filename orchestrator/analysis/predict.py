"""From measured alpha-beta fits to the communication time of a training step.

Layout: world = tp x pp x dp ranks (x cp is not modelled), ranks ordered tensor-parallel fastest,
then data-parallel, then pipeline (Megatron's order), `gpus_per_node` ranks per node. A group whose
ranks lie on one node uses the `intra` fits; one rank per node, `inter`; otherwise `mixed` (then
`inter`). Terms per optimizer step:
- dp (without --fsdp): gradient all_reduce of the stage's shard in buckets,
  n_buckets x (alpha + bucket_bytes / bw);
- fsdp: per layer of the stage, all_gather twice (forward, backward) and reduce_scatter once of
  the layer's parameters: layers/pp x (2 t_ag(S_layer) + t_rs(S_layer));
- tp: per layer and micro-batch, 4 activation all_reduces (2 forward, 2 backward) of
  micro_batch x seq x hidden elements: layers/pp x micro_batches x 4 x t_ar(S_act);
- pp: per micro-batch, one activation send forward and one gradient send backward across each
  stage boundary on the critical path: micro_batches x 2 x t_sr(S_act).
"""

# Pure functions (no I/O); the docstring above is `collbench predict --help`'s description.
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from orchestrator.analysis.fits import fit_groups
from workloads import registry
from workloads.messages import topology_of


@dataclass(frozen=True)
class Layout:
    params: float
    dp: int = 1
    tp: int = 1
    pp: int = 1
    fsdp: bool = False
    dtype_bytes: int = 2
    bucket_mb: float = 25.0
    layers: int = 32
    hidden: int = 4096
    seq: int = 4096
    micro_batch: int = 1
    micro_batches: int = 1
    gpus_per_node: int = 8


@dataclass(frozen=True)
class FitRef:
    collective: str
    topology: str
    world_size: int
    alpha_us: float
    bandwidth_gbps: float  # algorithm bandwidth: time = alpha + bytes / bandwidth
    min_bytes: int
    max_bytes: int
    note: str = ""

    def time_us(self, msg_bytes: float) -> float:
        """The fit's time; with an intercept below zero (fits.NEGATIVE_ALPHA), a size below the
        smallest measured takes the smallest's time (the line would fall under zero there)."""
        if self.alpha_us < 0:
            msg_bytes = max(msg_bytes, self.min_bytes)
        return self.alpha_us + msg_bytes / (self.bandwidth_gbps * 1e3)

    def outside(self, msg_bytes: float, factor: float = 4.0) -> bool:
        return msg_bytes > self.max_bytes * factor or msg_bytes < self.min_bytes / factor


def fit_table(df: pd.DataFrame) -> dict[tuple[str, str, int], FitRef]:
    """The fits the report accepts (the same rule), by (collective, topology, world size)."""
    return fit_tables(df)[0]


def fit_tables(df: pd.DataFrame) -> tuple[dict[tuple[str, str, int], FitRef], dict[tuple[str, str, int], str]]:
    """The accepted fits (fit_table) and, by the same key, why each other shape's fit was rejected."""
    accepted, rejected = {}, {}
    for coll, topo, n, per_size, fit in fit_groups(df):
        if fit.poor:
            rejected[coll, topo, n] = fit.reason
        else:
            accepted[coll, topo, n] = FitRef(coll, topo, n, fit.alpha_us, fit.bandwidth_gbps,
                                             int(per_size.index.min()), int(per_size.index.max()))
    return accepted, rejected


def _rejected(rejected: dict, collective: str, topology: str, world: int) -> str | None:
    """Where no accepted fit prices a group: the rejected fit that would have (as choose_fit picks
    one), in words."""
    key = _nearest(rejected, collective, topology, world)
    return None if key is None else f"{collective} {key[1]} world {key[2]}: its fit rejected ({rejected[key]})"


def group_topology(size: int, stride: int, gpus_per_node: int) -> str:
    """Topology of a group of `size` ranks spaced `stride` apart, from rank 0."""
    return topology_of([i * stride // gpus_per_node for i in range(size)]).value


# where a group's own topology was not measured: a mixed group is priced as inter, and either from the
# cluster's intra-domain fits where its nodes share one NVLink domain
_FALLBACK = {"mixed": ("mixed", "inter", "intra-domain"), "inter": ("inter", "intra-domain")}


def _nearest(keys, collective: str, topology: str, world: int) -> tuple[str, str, int] | None:
    """The (collective, topology, world size) of `keys` that prices a group: its own topology first
    (then _FALLBACK's), this world size, else the nearest measured; None where none is."""
    for topo in _FALLBACK.get(topology, (topology,)):
        same = [k for k in keys if k[0] == collective and k[1] == topo]
        if same:
            return min(same, key=lambda k: (abs(math.log2(k[2]) - math.log2(world)), k[2]))
    return None


def choose_fit(fits: dict, collective: str, topology: str, world: int) -> FitRef | None:
    """The fit for exactly this group, else the nearest measured world size of the same topology,
    its bandwidth scaled by the collective's busbw factor (the link's bus bandwidth is what
    carries over: algbw(n) = busbw / factor(n)) and said in `note`; `mixed` falls back to `inter`,
    and a group across nodes to the cluster's `intra-domain` fits where its nodes share one NVLink
    domain (an NVL72 rack measures no `inter` group inside it)."""
    key = _nearest(fits, collective, topology, world)
    if key is None:
        return None
    ref, (_, topo, n) = fits[key], key
    if n == world:
        return ref if topo == topology else FitRef(**{**ref.__dict__, "note": f"from {topo} world {world}"})
    factor = registry.get(collective).busbw_factor
    scale = factor(n) / factor(world) if factor(world) > 0 and factor(n) > 0 else 1.0
    return FitRef(**{**ref.__dict__, "bandwidth_gbps": ref.bandwidth_gbps * scale,
                     "note": f"from {topo} world {n}, bandwidth scaled x{scale:.3g} by the busbw factor "
                             f"for world {world}"})


def _sweep_for(collective: str, topology: str, size: int, msg_bytes: float) -> str:
    """The `collbench run` that would measure a missing term."""
    pattern = {"intra": "intra", "inter": "inter", "mixed": "mixed", "intra-domain": "domain"}[topology]
    low, high = max(8, int(msg_bytes) >> 6), max(int(msg_bytes) * 4, 1 << 20)
    return (f"collbench run --collectives {collective} --patterns {pattern} -b {low} -e {high} -f 2"
            + (f" --group-sizes {size}" if topology != "intra" or size > 1 else ""))


def predict(layout: Layout, fits: dict, rejected: dict | None = None) -> list[dict]:
    """One dict per term: name, formula, fit used, bytes per operation, count, time. A term no
    accepted fit prices names the rejected fit that would have, and why, where `rejected` has one."""
    lay = layout
    terms = []
    shard = lay.params * lay.dtype_bytes / (lay.tp * lay.pp)
    act = lay.micro_batch * lay.seq * lay.hidden * lay.dtype_bytes

    def term(name: str, formula: str, coll: str, size: int, stride: int, msg: float, count: float) -> None:
        topo = group_topology(size, stride, lay.gpus_per_node)
        ref = choose_fit(fits, coll, topo, size)
        if ref is None:
            why = _rejected(rejected or {}, coll, topo, size)
            terms.append({"term": name, "formula": formula, "fit": why or f"no accepted {coll} fit ({topo})",
                          "msg_bytes": msg, "count": count, "time_ms": None,
                          "warning": "fit rejected" if why else "not measured",
                          "measure_with": _sweep_for(coll, topo, size, msg)})
            return
        warn = "EXTRAPOLATED beyond the measured sizes" if ref.outside(msg) else ""
        terms.append({
            "term": name, "formula": formula,
            "fit": f"{coll} {ref.topology} world {ref.world_size}: alpha {ref.alpha_us:.1f} us, "
                   f"{ref.bandwidth_gbps:.3g} GB/s" + (f" ({ref.note})" if ref.note else ""),
            "msg_bytes": msg, "count": count, "time_ms": count * ref.time_us(msg) / 1e3,
            "warning": "; ".join(x for x in (warn, ref.note and "other world size") if x),
        })

    if lay.dp > 1 and not lay.fsdp:
        bucket = min(lay.bucket_mb * 1e6, shard)
        n_buckets = math.ceil(shard / bucket)
        term("dp gradient all_reduce", "ceil(shard/bucket) x (alpha + bucket/bw)", "all_reduce",
             lay.dp, lay.tp, bucket, n_buckets)
    if lay.dp > 1 and lay.fsdp:
        layer = lay.params * lay.dtype_bytes / lay.tp / lay.layers  # one layer's parameters in a TP shard
        stage_layers = lay.layers / lay.pp
        term("fsdp all_gather (fwd+bwd)", "layers/pp x 2 x (alpha + S_layer/bw)", "all_gather", lay.dp, lay.tp,
             layer, 2 * stage_layers)
        term("fsdp reduce_scatter", "layers/pp x (alpha + S_layer/bw)", "reduce_scatter", lay.dp, lay.tp,
             layer, stage_layers)
    if lay.tp > 1:
        term("tp activation all_reduce", "layers/pp x micro_batches x 4 x (alpha + S_act/bw)", "all_reduce",
             lay.tp, 1, act, lay.layers / lay.pp * lay.micro_batches * 4)
    if lay.pp > 1:
        term("pp activation send/recv", "micro_batches x 2 x (alpha + S_act/bw)", "send_recv", 2,
             lay.tp * lay.dp, act, lay.micro_batches * 2)
    return terms


def trace_steps(program, fits: dict, ranks_per_node: int) -> tuple[list[dict], list[dict]]:
    """A traced job's ops priced from the fits (commands.predict --trace): per step, the slowest
    rank's sum of its ops' times; per traced op shape (group, collective, bytes), one term with the
    fit it used. Ops with no accepted fit are terms without a time, with the sweep that measures them."""
    groups = {name: ranks for name, _, ranks in program.groups}
    labels = {name: label for name, label, _ in program.groups}
    terms: dict[tuple, dict] = {}
    per_step: dict[int, dict[int, float]] = {}
    for rank, ops in enumerate(program.ops):
        for op in ops:
            # a barrier is replayed as a one-element all_reduce, and priced as one
            kind, msg_bytes = ("all_reduce", 4) if op.kind == "barrier" else (op.kind, op.msg_bytes)
            ranks = groups[op.group]
            topo = topology_of([r // ranks_per_node for r in ranks]).value
            key = (labels[op.group], kind, msg_bytes)
            if key not in terms:
                ref = choose_fit(fits, kind, topo, len(ranks))
                terms[key] = {"term": f"{kind} on {labels[op.group]}", "process_group": labels[op.group],
                              "world_size": len(ranks), "topology": topo, "msg_bytes": msg_bytes, "count": 0,
                              "ref": ref}
            t = terms[key]
            if rank == min(ranks):
                t["count"] += 1  # once per op, not per member
            if t["ref"] is not None:
                step_ranks = per_step.setdefault(op.step, {})
                step_ranks[rank] = step_ranks.get(rank, 0.0) + t["ref"].time_us(msg_bytes)
    out = []
    for t in terms.values():
        ref = t.pop("ref")
        if ref is None:
            out.append({**t, "fit": f"no accepted {t['term'].split()[0]} fit ({t['topology']})", "time_ms": None,
                        "warning": "not measured", "measure_with": _sweep_for(t["term"].split()[0], t["topology"],
                                                                               t["world_size"], t["msg_bytes"])})
            continue
        per_op_us = ref.time_us(t["msg_bytes"])
        out.append({**t, "fit": f"{ref.collective} {ref.topology} world {ref.world_size}: alpha {ref.alpha_us:.1f} us, "
                                f"{ref.bandwidth_gbps:.3g} GB/s" + (f" ({ref.note})" if ref.note else ""),
                    "time_ms": t["count"] / max(program.steps, 1) * per_op_us / 1e3,
                    "warning": "EXTRAPOLATED beyond the measured sizes" if ref.outside(t["msg_bytes"]) else ""})
    steps = [{"step": s, "comm_ms": max(r.values()) / 1e3} for s, r in sorted(per_step.items())]
    return steps, out
