"""Patterns -> rounds -> groups of global ranks. Pure: no Ray, no I/O.

A round is a set of disjoint groups that run at the same time. Patterns:
- intra: groups inside each node, 2, 4, ... up to all ranks of the node (one rank where nodes
  have one);
- inter: one rank per node over k = 2, 4, ... up to all nodes, rail-aligned (local rank i only
  talks to local rank i), every rail and every block of k nodes at once;
- mixed: blocks of k nodes with all their ranks;
- pairwise: every node pair exactly once (circle method: N-1 rounds for even N, N for odd);
- intra-pairwise: every pair of ranks inside each node, all nodes at once (circle method over
  the ranks of a node: N-1 rounds for N ranks per node), to name a bad GPU or NVLink;
- kbatch:K: consecutive blocks of K nodes with all their ranks, all at once.

Where nodes report NVLink domains (Node.nvlink_domain: an NVL72 rack's trays share one), and
only there (elsewhere they are refused, naming the pattern):
- domain: all ranks of all nodes of each domain, every domain at once;
- domain-pairwise: every node pair inside each domain (circle method per domain, all domains at once);
- cross-domain: one GPU per domain, rail-aligned (the j-th node of every domain, local rank i), all at once;
- domain-pairs: every pair of whole domains (circle method over the domains).
Nodes without a domain take no part in these patterns.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from orchestrator.errors import UsageError
from orchestrator.sweep import traffic
from orchestrator.sweep.inventory import Inventory
from orchestrator.sweep.spec import DOMAIN_PATTERNS, SweepSpec
from workloads import registry
from workloads.dtypes import ELEMENT_BYTES, NO_OP
from workloads.messages import Case
from workloads.traffic import busiest_numel


@dataclass(frozen=True, slots=True)
class Group:
    group_id: str
    pattern: str
    round: int
    ranks: tuple[int, ...]  # global ranks in group-rank order
    pair: tuple[int, int] | None = None  # pairwise: the two node indices
    phase: str | None = None  # qualify: the step that made it (intra, pairs, retest, gate, bisect)


@dataclass(frozen=True)
class Plan:
    rounds: tuple[tuple[Group, ...], ...]

    @property
    def groups(self) -> Iterator[Group]:
        for r in self.rounds:
            yield from r

    def __len__(self) -> int:
        return sum(len(r) for r in self.rounds)


def build_cases(spec: SweepSpec, n: int) -> list[Case]:
    """Every (workload, dtype, op, in_place) with its rounded element counts, for n ranks."""
    cases = []
    for name in spec.collectives:
        coll = registry.collective_of(name)
        if n < coll.min_ranks:
            continue
        for dtype in spec.dtypes:
            counts = sorted({registry.round_count(coll.name, b, ELEMENT_BYTES[dtype], n) for b in spec.sizes()} - {0})
            if not counts:
                continue
            # overlap measures all_reduce (sum, in place) against a matmul
            ops = ("sum",) if name == registry.OVERLAP else spec.ops if coll.reduces else (NO_OP,)
            matrix = {}
            if name == "all_to_allv":  # its matrix for this group size, the same on every rank
                chosen = traffic.parse(spec.traffic)
                matrix = {"traffic": chosen.for_ranks(n), "traffic_source": chosen.source}
                # a size too small for any cell to carry one element measures an empty exchange
                counts = [c for c in counts if busiest_numel(matrix["traffic"], c)]
                if not counts:
                    continue
            cases += [
                Case(name, dtype, op, in_place, tuple(counts), spec.iters, spec.warmup, spec.check_iters,
                     spec.root, spec.compute_flops, cuda_graph=spec.cuda_graph, **matrix)
                for op in ops
                for in_place in coll.in_place_modes
            ]
    return cases


def one_size_each(cases: list[Case]) -> list[Case]:
    """A plain collective's case as one call per size (each size is measured on its own anyway:
    its buffers, warm-up, timing and check): an interrupt or a crash loses the size in flight, not
    the sizes before it, and its row prints as it ends. A workload of its own (overlap) stays whole."""
    out = []
    for c in cases:
        out += [replace(c, counts=(n,)) for n in c.counts] if c.collective in registry.COLLECTIVES else [c]
    return out


def case_deadline_s(spec: SweepSpec, case: Case) -> float:
    """--group-timeout plus the time the case's bytes take at --deadline-rate: every warm-up, timed
    and check iteration of every size moves its send and receive buffers once (timed iterations
    twice: a GPU times each call, then the batch; overlap times its all_reduce three times: alone,
    beside the matmul's own timing, and with it)."""
    if case.replay is not None:  # every step's ops, the warm-up's too, each moving its bytes twice, and its gaps
        prog = case.replay
        passes = prog.warmup_steps / max(prog.steps, 1) + prog.repeat
        per_rank = [sum(2 * op.msg_bytes for op in ops) for ops in prog.ops]
        gaps_s = sum(max((op.offset_us for op in ops if op.step == s), default=0.0)
                     for ops in prog.ops[:1] for s in range(prog.steps)) / 1e6 if prog.gaps else 0.0
        return spec.group_timeout_s + passes * (max(per_rank, default=0) / (spec.deadline_rate_gbps * 1e9) + gaps_s)
    timed = (case.warmup + 2 * case.iters) * (3 if case.collective == registry.OVERLAP else 1)
    traffic = sum((timed + case.check_iters) * 2 * count * ELEMENT_BYTES[case.dtype] for count in case.counts)
    return spec.group_timeout_s + traffic / (spec.deadline_rate_gbps * 1e9)


def check_plan(spec: SweepSpec, plan: Plan) -> None:
    """Refuse what no group of the plan could run (before any actor starts)."""
    smallest = min(len(g.ranks) for g in plan.groups)
    if spec.root >= smallest and {"broadcast", "reduce"} & set(spec.collectives):
        raise UsageError(f"--root {spec.root}: the plan has groups of only {smallest} ranks")
    if "all_to_allv" in spec.collectives:  # a matrix file smaller than the largest group
        traffic.parse(spec.traffic).for_ranks(max(len(g.ranks) for g in plan.groups))


def doubling(limit: int) -> list[int]:
    """2, 4, 8, ... below `limit`, then `limit` itself (when >= 2)."""
    out, k = [], 2
    while k < limit:
        out.append(k)
        k *= 2
    if limit >= 2:
        out.append(limit)
    return out


def nodes_needed(pattern: str) -> int:
    """The fewest nodes a pattern forms a group on (auto: 1)."""
    if pattern == "auto" or pattern.startswith("intra"):
        return 1
    return int(pattern.split(":")[1]) if pattern.startswith("kbatch:") else 2


def resolve_patterns(patterns: tuple[str, ...], n_nodes: int) -> list[str]:
    """Expand `auto`; refuse patterns that need more nodes than the cluster has."""
    out = []
    for p in patterns:
        if p == "auto":
            out += ["intra"] + (["inter", "mixed"] if n_nodes > 1 else [])
            continue
        need = nodes_needed(p)
        if n_nodes < need:
            raise UsageError(f"--patterns {p}: needs at least {need} nodes, the cluster has {n_nodes}")
        out.append(p)
    return list(dict.fromkeys(out))


def check_domains(patterns: tuple[str, ...], inv: Inventory) -> None:
    """Refuse a domain pattern the cluster's NVLink domain facts cannot give a group (one line,
    naming the pattern): no domain known, one domain only, or no domain of two nodes."""
    domains = inv.domains()
    for p in patterns:
        if p not in DOMAIN_PATTERNS:
            continue
        if not domains:
            raise UsageError(f"--patterns {p}: no node reports an NVLink domain (nvidia-smi -q: Fabric State "
                             f"Completed, Status Success, a ClusterUUID and CliqueId shared across nodes, as on "
                             f"GB200/GB300 NVL72) among the {len(inv.nodes)} node(s)")
        if p in ("cross-domain", "domain-pairs") and len(domains) < 2:
            raise UsageError(f"--patterns {p}: needs two NVLink domains, the cluster's nodes are in 1")
        if p in ("domain", "domain-pairwise") and max(map(len, domains.values())) < 2:
            raise UsageError(f"--patterns {p}: each of the {len(domains)} NVLink domain(s) has one node here "
                             "(no domain spans nodes)")


def make_plan(spec: SweepSpec, inv: Inventory) -> Plan:
    check_domains(spec.patterns, inv)
    patterns = resolve_patterns(spec.patterns, len(inv.nodes))
    sizes = set(spec.group_sizes)
    rounds: list[tuple[str, list[tuple[tuple[int, ...], tuple[int, int] | None]]]] = []
    sizes_seen: set[int] = set()
    for pattern in patterns:
        for members in _pattern_rounds(pattern, inv):
            if sizes and pattern in ("intra", "inter", "mixed"):
                sizes_seen.update(len(m[0]) for m in members)
                members = [m for m in members if len(m[0]) in sizes]
            if not members:
                continue
            if spec.concurrent:
                rounds.append((pattern, members))
            else:
                rounds.extend((pattern, [m]) for m in members)
    impossible = sorted(sizes - sizes_seen) if any(p in ("intra", "inter", "mixed") for p in patterns) else []
    if impossible:
        raise UsageError(
            f"--group-sizes {','.join(map(str, impossible))}: no intra/inter/mixed group of that many ranks on "
            f"{len(inv.nodes)} node(s) of {inv.world_size} rank(s) (possible: {','.join(map(str, sorted(sizes_seen)))})"
        )
    if not rounds:
        raise UsageError(
            f"--patterns {','.join(spec.patterns)}: no group to run on {len(inv.nodes)} node(s) "
            f"of {inv.world_size} rank(s)"
            + (f" with --group-sizes {','.join(map(str, spec.group_sizes))}" if sizes else "")
        )
    out = []
    for r, (pattern, members) in enumerate(rounds):
        out.append(
            tuple(Group(f"r{r}-g{i}", pattern, r, ranks, pair) for i, (ranks, pair) in enumerate(members))
        )
    return Plan(tuple(out))


def _pattern_rounds(pattern: str, inv: Inventory):
    first = inv.first_rank()
    counts = [n.ranks for n in inv.nodes]
    n_nodes = len(counts)

    def all_ranks(nodes) -> tuple[int, ...]:
        return tuple(r for i in nodes for r in range(first[i], first[i] + counts[i]))

    if pattern == "intra":
        # one-rank groups where no node has two ranks: a one-GPU machine is checked end to end
        for s in doubling(max(counts)) or [1]:
            yield [
                (tuple(range(first[i] + b * s, first[i] + (b + 1) * s)), None)
                for i in range(n_nodes)
                for b in range(counts[i] // s)
            ]
    elif pattern == "inter":
        for k in doubling(n_nodes):
            members = []
            for b in range(n_nodes // k):
                nodes = range(b * k, (b + 1) * k)
                rails = min(counts[i] for i in nodes)
                members += [(tuple(first[i] + rail for i in nodes), None) for rail in range(rails)]
            yield members
    elif pattern == "mixed":
        if max(counts) > 1:
            for k in doubling(n_nodes):
                yield [(all_ranks(range(b * k, (b + 1) * k)), None) for b in range(n_nodes // k)]
    elif pattern == "intra-pairwise":
        for pairs in circle_rounds(max(counts)):
            yield [((first[i] + a, first[i] + b), None) for i in range(n_nodes) for a, b in pairs
                   if b < counts[i]]
    elif pattern == "pairwise":
        for pairs in circle_rounds(n_nodes):
            yield [(all_ranks(p), p) for p in pairs]
    elif pattern in DOMAIN_PATTERNS:
        yield from _domain_rounds(pattern, inv, all_ranks)
    elif pattern.startswith("kbatch:"):
        k = int(pattern.split(":")[1])
        blocks = [range(b, min(b + k, n_nodes)) for b in range(0, n_nodes, k)]
        yield [(all_ranks(nodes), None) for nodes in blocks if len(nodes) >= 2]
    else:  # guarded by SweepSpec
        raise ValueError(pattern)


def _domain_rounds(pattern: str, inv: Inventory, all_ranks):
    first = inv.first_rank()
    domains = list(inv.domains().values())  # node indices of each domain, domains in order of their first node
    if pattern == "domain":
        yield [(all_ranks(nodes), None) for nodes in domains if len(nodes) >= 2]
    elif pattern == "domain-pairwise":
        spanning = [nodes for nodes in domains if len(nodes) >= 2]
        per = [circle_rounds(len(nodes)) for nodes in spanning]
        for k in range(max(map(len, per), default=0)):
            yield [(all_ranks((nodes[a], nodes[b])), (nodes[a], nodes[b]))
                   for nodes, rounds in zip(spanning, per) if k < len(rounds) for a, b in rounds[k]]
    elif pattern == "cross-domain":
        depth = min(map(len, domains))
        yield [(tuple(sorted(first[d[j]] + rail for d in domains)), None) for j in range(depth)
               for rail in range(min(inv.nodes[d[j]].ranks for d in domains))]
    else:  # domain-pairs
        for pairs in circle_rounds(len(domains)):
            yield [(all_ranks(sorted((*domains[a], *domains[b]))), None) for a, b in pairs]


def circle_rounds(n: int) -> list[list[tuple[int, int]]]:
    """Round-robin tournament: every pair of 0..n-1 once, no index twice in a round.

    Fix the first seat and rotate the others; for odd n a dummy seat gives each node one bye.
    """
    seats = list(range(n)) + ([-1] if n % 2 else [])
    m = len(seats)
    rounds = []
    for _ in range(m - 1):
        pairs = []
        for i in range(m // 2):
            a, b = seats[i], seats[m - 1 - i]
            if a >= 0 and b >= 0:
                pairs.append((min(a, b), max(a, b)))
        rounds.append(pairs)
        seats = [seats[0], seats[-1], *seats[1:-1]]
    return rounds
