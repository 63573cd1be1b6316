"""SweepSpec: everything a run measures, validated once, before Ray starts.

Each field carries its command-line flag and help text, so the CLI and `--config` YAML files are
built from this one declaration (a YAML key is the long flag's name with underscores: `group_timeout`
for --group-timeout; the field's own name, where it differs, is the old key, kept one release). Every bad value raises UsageError
with one line naming the field and the value; the CLI turns it into exit code 2.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any

from orchestrator.errors import UsageError, renamed
from orchestrator.sweep import traffic
from orchestrator.sweep.sizes import BitUnit, format_bytes, parse_bytes, sweep
from orchestrator.sweep.spec_values import KIND_WORDS, brief_repr, env_value, strict_int
from orchestrator.sweep.units import format_duration, parse_duration
from workloads.comm_env import COMM_ENV_PREFIXES as ENV_PREFIXES
from workloads.dtypes import BACKEND_DTYPES, DTYPE_ALIASES, ELEMENT_BYTES, OPS, unsupported_pair
from workloads.registry import COLLECTIVES, WORKLOADS

# the patterns of NVLink domains across nodes (NVL72): planned only where the nodes report domains
DOMAIN_PATTERNS = ("domain", "domain-pairwise", "cross-domain", "domain-pairs")
PATTERNS = ("intra", "inter", "mixed", "pairwise", "intra-pairwise", *DOMAIN_PATTERNS)  # and kbatch:K
# Upper bounds: a value past them would exhaust memory or time (or overflow a timeout) somewhere
# after Ray started, so it is refused here, with the bound named.
MAX_MSG_BYTES = 1 << 40  # 1T: more than any device holds
MAX_ITERS = 1_000_000  # per size: warm-up, timed and check iterations each
MAX_RANKS = 1 << 20  # a rank index, a group's world size, K of kbatch:K
MAX_RANKS_PER_NODE = 1024  # CPU ranks: one actor process each
MAX_TIMEOUT_S = 7 * 24 * 3600.0  # --group-timeout
DEADLINE_RATE_GBPS = (1e-3, 1e6)  # --deadline-rate: 1 MB/s (deadlines stay below a timer's range) to 1 PB/s
MAX_COMPUTE_FLOPS = 1e15  # one overlap matmul: about a second of a whole GPU
MAX_NAME_BYTES, MAX_PATH_BYTES = 255, 4096  # Linux NAME_MAX and PATH_MAX
BACKENDS = ("auto", "nccl", "gloo")
# a default sweep: every even collective (all_to_allv's traffic is a choice of its own: --traffic)
DEFAULT_COLLECTIVES = tuple(c for c in COLLECTIVES if c != "all_to_allv")
ALL = "all"  # -d all: every dtype the backend supports, known once the backend is (for_backend)


def _opt(default: Any, flags: tuple[str, ...], help: str, kind: str = "str", **extra: Any) -> Any:
    meta = {"flags": flags, "help": help, "kind": kind, **extra}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True, kw_only=True)
class SweepSpec:
    collectives: tuple[str, ...] = _opt(
        DEFAULT_COLLECTIVES,
        ("--collectives",),
        "collectives to run, comma-separated: " + ",".join(COLLECTIVES) + ", or all (every one of them); also "
        "overlap (a matmul and all_reduce alone and together, not in the default nor in all); all_to_allv (uneven "
        "splits from --traffic) is not in the default",
        "list", every=COLLECTIVES,
    )
    dtypes: tuple[str, ...] = _opt(
        ("float32",), ("-d", "--dtypes"), "element types, comma-separated: " + ",".join(ELEMENT_BYTES) + ", or all "
        "(every type the backend supports); nccl-tests' names too (" + ",".join(DTYPE_ALIASES) + ")", "list",
        aliases=DTYPE_ALIASES,
    )
    ops: tuple[str, ...] = _opt(
        ("sum",), ("-o", "--op"), "reduction operators for reducing collectives: " + ",".join(OPS) + ", or all",
        "list", every=OPS,
    )
    min_bytes: int = _opt(16, ("-b", "--min-bytes"), "smallest message size (8, 1K, 64M, 1G)", "bytes")
    max_bytes: int = _opt(16 << 20, ("-e", "--max-bytes"), "largest message size", "bytes")
    step_factor: int = _opt(4, ("-f", "--step-factor"), "multiply the size by this between steps", "int")
    iters: int = _opt(20, ("-n", "--iters"), "timed iterations per size", "int")
    warmup: int = _opt(5, ("-w", "--warmup"), "untimed warm-up iterations per size", "int")
    check_iters: int = _opt(1, ("-c", "--check"), "check iterations per size after timing (0 disables)", "int")
    root: int = _opt(0, ("-r", "--root"), "root rank of broadcast and reduce", "int")
    backend: str = _opt("auto", ("--backend",), "auto (nccl when every rank has a GPU, else gloo), nccl or gloo")
    patterns: tuple[str, ...] = _opt(
        ("auto",),
        ("--patterns",),
        "group patterns, comma-separated: intra, inter, mixed, pairwise (every node pair), intra-pairwise "
        "(every rank pair inside each node), kbatch:K; auto = intra, plus inter and mixed on several nodes. Where "
        "nodes share NVLink domains (GB200/GB300 NVL72, read from nvidia-smi's Fabric section): domain (all nodes "
        "of each domain together), domain-pairwise (every node pair inside each domain), cross-domain (one GPU per "
        "domain), domain-pairs (every pair of whole domains)",
        "list",
    )
    group_sizes: tuple[int, ...] = _opt(
        (), ("--group-sizes",), "keep only intra/inter/mixed groups of these world sizes (comma-separated)", "ints"
    )
    concurrent: bool = _opt(
        True, ("--concurrent",), "run the disjoint groups of a round at the same time", "bool"
    )
    ranks_per_node: int = _opt(2, ("--ranks-per-node",), "ranks on each node without GPUs (CPU ranks)", "int")
    nodes: tuple[str, ...] = _opt(
        (), ("--nodes",), "measure only these nodes, comma-separated: IP address, host name or Ray node id (in a "
        "Slurm job, its Slurm name too; in a pod, its Kubernetes node name, through kubectl; default: every node "
        "that can hold a rank)", "list",
    )
    exclude: tuple[str, ...] = _opt(
        (), ("--exclude",), "leave these nodes out, comma-separated: IP address, host name or Ray node id (in a "
        "Slurm job, its Slurm name too; in a pod, its Kubernetes node name)", "list",
    )
    wait_nodes: int | None = _opt(None, ("--wait-nodes",), "wait, up to --group-timeout, for this many nodes, and refuse "
                                  "(exit 2) naming those that joined where fewer did (in a Slurm job, those that did not "
                                  "too); 0: what has joined (default: a Slurm job's $SLURM_JOB_NUM_NODES, else 0)", "int")
    group_timeout_s: float = _opt(
        300.0, ("--group-timeout",),
        "time a group may take to form, to leave, and for each case on top of its bytes' time (--deadline-rate): "
        "30s, 5m, 1h; a bare number is seconds", "duration",
    )
    deadline_rate_gbps: float = _opt(
        0.1, ("--deadline-rate",),
        "GB/s: each case's deadline is --group-timeout plus the time its bytes take at this rate (every warm-up, "
        "timed and check iteration moving its send and receive buffers once)", "float",
    )
    output: str = _opt("results", ("--output",), "results dataset directory (created if missing)")
    address: str | None = _opt(
        None, ("--address",), "Ray cluster to join (default: $RAY_ADDRESS, else start an embedded one)"
    )
    verbose: bool = _opt(
        False, ("--verbose",), "show Ray's own log lines too (its warnings and INFO lines, the workers' output); "
        "by default a run prints collbench's lines only, Ray's stay in its session logs", "bool",
    )
    env: tuple[str, ...] = _opt(
        (),
        ("--env",),
        "NAME=VALUE for the workers; only " + ", ".join(p + "*" for p in ENV_PREFIXES) + " (repeatable)",
        "env",
    )
    expect_net: str | None = _opt(
        None, ("--expect-net",),
        "fail every group that spans nodes unless its traffic uses this network, as NCCL's log names it "
        "(IB, Socket, EFA for AWS Libfabric, TCPX, TCPXO; gloo on CPUs)",
    )
    compute_flops: float = _opt(
        0.0, ("--compute-flops",), "overlap: flops of the matmul (2*m^3); 0 matches its time to the collective's",
        "float",
    )
    traffic: str | None = _opt(
        None, ("--traffic",),
        "all_to_allv's traffic matrix: a FILE (nccl-tests' NCCL_TESTS_ALLTOALLV_MATRIX_FILE form, CSV or YAML; "
        "cell i,j = what rank i sends rank j), moe:experts=E,topk=K,skew=S,seed=N (a mixture-of-experts router: "
        "Zipf skew S, 0 balanced; defaults 256,8,0,0), or nccl-tests:spread=S (its generated pattern, the default "
        "with spread 1); the sweep keeps its shape and scales it so the busiest rank moves -b..-e bytes",
    )
    allow_failures: bool = _opt(False, ("--allow-failures",), "exit 0 even when groups failed", "bool")
    cuda_graph: bool = _opt(
        False, ("--cuda-graph",), "time each size's batch as a CUDA graph replay of its iterations (nccl-tests' -G); "
        "NCCL on GPUs only; a collective that cannot be captured fails its rows with the reason", "bool",
    )

    def __post_init__(self) -> None:
        _check_choices("collectives", self.collectives, WORKLOADS)
        _check_choices("dtypes", self.dtypes, (*ELEMENT_BYTES, ALL))
        _check_choices("ops", self.ops, OPS)
        _check_choices("backend", (self.backend,), BACKENDS)
        for name, low, high in (("min_bytes", 1, MAX_MSG_BYTES), ("max_bytes", 1, MAX_MSG_BYTES),
                                ("iters", 1, MAX_ITERS), ("warmup", 0, MAX_ITERS), ("check_iters", 0, MAX_ITERS),
                                ("root", 0, MAX_RANKS - 1), ("ranks_per_node", 1, MAX_RANKS_PER_NODE),
                                ("step_factor", 2, MAX_MSG_BYTES)):
            _check_at_least(name, getattr(self, name), low, high)
        if self.min_bytes > self.max_bytes:
            raise UsageError(
                f"{_flag('min_bytes')} {self.min_bytes} is larger than {_flag('max_bytes')} {self.max_bytes}"
            )
        if not 0 <= self.compute_flops <= MAX_COMPUTE_FLOPS:  # nan too: the manifest is JSON
            raise UsageError(f"{_flag('compute_flops')} {self.compute_flops!r}: must be 0 (matched to the "
                             f"collective's time) or positive, at most {MAX_COMPUTE_FLOPS:g}")
        if self.traffic is not None:
            if "all_to_allv" not in self.collectives:
                raise UsageError(f"{_flag('traffic')} {self.traffic[:80]}: only all_to_allv takes a traffic matrix "
                                 "(add it to --collectives)")
            traffic.parse(self.traffic)
        if self.cuda_graph and self.backend == "gloo":
            raise UsageError(f"{_flag('cuda_graph')}: needs --backend nccl (gloo runs on the host: no CUDA graph)")
        for name, low, high in (("group_timeout_s", 0.0, MAX_TIMEOUT_S), ("deadline_rate_gbps", *DEADLINE_RATE_GBPS)):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise UsageError(f"{_flag(name)} {value!r}: must be a positive number")
            if not low <= value <= high:
                raise UsageError(f"{_flag(name)} {value!r}: must be between {low:g} and {high:g}")
        for size in self.group_sizes:
            _check_at_least("group_sizes", size, 1, MAX_RANKS)
        if self.wait_nodes is not None:
            _check_at_least("wait_nodes", self.wait_nodes, 0, MAX_RANKS)
        if not self.patterns:
            raise UsageError(f"{_flag('patterns')}: empty list (choose from auto,{','.join(PATTERNS)},kbatch:K)")
        for pattern in self.patterns:
            _check_pattern(pattern)
        for item in self.env:
            _check_env(item)
        for name in ("nodes", "exclude"):
            for node in getattr(self, name):
                if not _printable(node) or len(node) > MAX_NAME_BYTES or "," in node:
                    raise UsageError(f"{_flag(name)} {node[:80]!r}: not a node (an IP address, host name or node id)")
        both = sorted(set(self.nodes) & set(self.exclude))
        if both:
            raise UsageError(f"--exclude {both[0]}: also in --nodes; name a node in one of them")
        if self.backend != "auto":
            message = unsupported_pair(self.backend, [d for d in self.dtypes if d != ALL])
            if message:
                raise UsageError(message)
        _check_path("output", self.output)
        if self.address is not None and (not self.address.strip() or not _printable(self.address)
                                         or len(self.address) > MAX_NAME_BYTES):
            # '' would silently mean $RAY_ADDRESS or an embedded instance
            raise UsageError(f"{_flag('address')} {self.address[:80]!r}: expected HOST:PORT (omit --address "
                             "for $RAY_ADDRESS or an embedded instance)")
        if self.expect_net is not None and (not self.expect_net.strip() or not _printable(self.expect_net)
                                            or len(self.expect_net) > 64):
            raise UsageError(f"{_flag('expect_net')} {self.expect_net[:80]!r}: expected a network name such as IB")

    # -- derived values -------------------------------------------------------------------
    def sizes(self) -> list[int]:
        return sweep(self.min_bytes, self.max_bytes, self.step_factor)

    def env_vars(self) -> dict[str, str]:
        return dict(item.split("=", 1) for item in self.env)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def spec_fields() -> list[dataclasses.Field]:
    return list(dataclasses.fields(SweepSpec))


def _flag(name: str) -> str:
    f = next(f for f in spec_fields() if f.name == name)
    return f.metadata["flags"][-1]


def _check_choices(name: str, values: tuple[str, ...], allowed: tuple[str, ...]) -> None:
    if not values:
        raise UsageError(f"{_flag(name)}: empty list (choose from {','.join(allowed)})")
    for v in values:
        if v not in allowed:
            raise UsageError(f"{_flag(name)}: unknown value {v!r} (choose from {','.join(allowed)})")


def _check_at_least(name: str, value: Any, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{_flag(name)} {value!r}: must be an integer")
    if value < low:
        raise UsageError(f"{_flag(name)} {value}: must be at least {low}")
    if high is not None and value > high:
        shown = value if value < 10**30 else f"{str(value)[:12]}... ({len(str(value))} digits)"
        raise UsageError(f"{_flag(name)} {shown}: must be at most {high}")


def _printable(text: str) -> bool:
    """No control characters (NUL, newline, ...): they cannot be in a path, an address or a name."""
    return all(ch.isprintable() for ch in text)


def _check_path(name: str, path: str) -> None:
    """A local path the kernel can create (NUL-free, each name and the whole within Linux's
    limits), checked before Ray starts; a URI's own checks come when it is resolved."""
    flag = _flag(name)
    if not path:
        raise UsageError(f"{flag}: empty path")
    if not _printable(path):
        raise UsageError(f"{flag} {path[:80]!r}: contains a control character")
    longest = max(path.split("/"), key=lambda part: len(part.encode()))
    if len(longest.encode()) > MAX_NAME_BYTES:
        raise UsageError(f"{flag} {path[:80]}...: a name of {len(longest.encode())} bytes, longer than the "
                         f"{MAX_NAME_BYTES} a file system allows")
    if len(path.encode()) > MAX_PATH_BYTES:
        raise UsageError(f"{flag} {path[:80]}...: {len(path.encode())} bytes, longer than the {MAX_PATH_BYTES} "
                         "a path may have")


def _check_pattern(pattern: str) -> None:
    if pattern in PATTERNS or pattern == "auto":
        return
    m = re.fullmatch(r"kbatch:([0-9]{1,7})", pattern)
    if m and 2 <= int(m.group(1)) <= MAX_RANKS:
        return
    raise UsageError(f"--patterns: unknown pattern {pattern[:80]!r} (choose from auto,{','.join(PATTERNS)},"
                     f"kbatch:K with 2<=K<={MAX_RANKS})")


def _check_env(item: str) -> None:
    if not isinstance(item, str):
        raise UsageError(f"--env {item!r}: expected NAME=VALUE")
    name, sep, value = item.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or "\x00" in value:
        raise UsageError(f"--env {item[:80]!r}: expected NAME=VALUE (a variable name, a value without NUL)")
    if not name.startswith(ENV_PREFIXES):
        raise UsageError(
            f"--env {name}: only communication variables may be passed ({', '.join(p + '*' for p in ENV_PREFIXES)})"
        )


# -- building a spec from text (CLI strings or YAML values) ---------------------------------
def convert(f: dataclasses.Field, value: Any) -> Any:
    """One raw value (a CLI string or a YAML scalar/list) to the field's type, or UsageError."""
    kind, flag = f.metadata["kind"], f.metadata["flags"][-1]
    if value is None and f.default is None:  # a field unset by default: a saved spec's null, YAML's `key: null`
        return None
    try:
        if kind in ("list", "ints", "env") and isinstance(value, (list, tuple)) and \
                not all(isinstance(v, (str, int, float)) for v in value):
            raise ValueError  # a YAML list of lists (or an alias bomb) is no list of names
        if kind == "list":
            items = value.split(",") if isinstance(value, str) else list(value)
            names = [str(v).strip() for v in items if str(v).strip()]
            names = [f.metadata.get("aliases", {}).get(v, v) for v in names]
            if ALL in names and "every" in f.metadata:
                names = [e for v in names for e in (f.metadata["every"] if v == ALL else (v,))]
            return tuple(dict.fromkeys(names))
        if kind == "ints":
            items = value.split(",") if isinstance(value, str) else list(value)
            sizes = tuple(strict_int(v) for v in items if str(v).strip())
            if isinstance(value, str) and not sizes:  # `--group-sizes ''` would silently mean every size
                raise ValueError
            return sizes
        if kind == "env":
            if isinstance(value, dict):  # YAML `env: {NCCL_ALGO: Ring}`
                return tuple(f"{name}={env_value(name, v)}" for name, v in value.items())
            return tuple(map(str, value)) if isinstance(value, (list, tuple)) else (str(value),)
        if kind == "bytes":
            return parse_bytes(value)
        if kind == "int":
            return strict_int(value)
        if kind == "duration":
            return parse_duration(value, flag, MAX_TIMEOUT_S)
        if kind == "float":
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if kind == "bool":
            if not isinstance(value, bool):
                raise ValueError
            return value
        if value is not None and not isinstance(value, str):
            raise ValueError
        return value
    except UsageError:
        raise
    except BitUnit as e:
        raise UsageError(f"{flag} {brief_repr(value)}: {e}") from None
    except (ValueError, TypeError):
        raise UsageError(f"{flag} {brief_repr(value)}: expected {KIND_WORDS[kind]}") from None


def key_of(f: dataclasses.Field) -> str:
    """The field's key in a --config file and the API: its long flag's name with underscores."""
    return f.metadata["flags"][-1].lstrip("-").replace("-", "_")


def field_of(key: str) -> dataclasses.Field | None:
    """The field a --config or API key names: its key, or its old key (the field's name)."""
    return next((f for f in spec_fields() if key in (key_of(f), f.name)), None)


def from_mapping(values: dict[str, Any], source: str = "config", only: tuple[str, ...] | None = None,
                 command: str | None = None) -> dict[str, Any]:
    """Converted keyword arguments (by field name) from a mapping of option keys (a YAML sweep
    file, the API's options). A field's own name where it differs from its key (`group_timeout_s`)
    is the old key: taken for one release, with a note. `only`: the fields `command` takes; a key
    of any other is refused, as its flag is on that command line."""
    taken = [key_of(f) for f in spec_fields() if only is None or f.name in only]
    out = {}
    for key, value in values.items():
        f = field_of(key) if isinstance(key, str) else None
        if f is None:
            raise UsageError(f"{source}: unknown key {brief_repr(key)} (known: {', '.join(taken)})")
        if only is not None and f.name not in only:
            raise UsageError(f"{source}: key {key!r} is not an option of {command or 'this command'} "
                             f"(its keys: {', '.join(taken)})")
        if f.name in out:
            raise UsageError(f"{source}: keys {key_of(f)!r} and {f.name!r} are one option; keep {key_of(f)!r}")
        if key != key_of(f):
            renamed(f"{source}: key {key}", key_of(f))
        out[f.name] = convert(f, value)
    return out


def read_config(path: str) -> dict[str, Any]:
    """A --config file's keys and values (not yet converted: from_mapping does that); an empty file
    is no keys."""
    from orchestrator import yamlfile

    data = yamlfile.read(path, "--config")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"--config {path}: expected a mapping of option names to values")
    return data


def shown(f: dataclasses.Field, value: Any) -> str:
    """A field's value as its flag takes it (a help's default): 16M, 5m, a,b; '' for none."""
    kind = f.metadata["kind"]
    if value in ("", None):
        return ""
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return format_bytes(value) if kind == "bytes" else format_duration(value) if kind == "duration" else str(value)


def from_fields(values: dict[str, Any], source: str) -> dict[str, Any]:
    """Converted keyword arguments from a mapping of field names: a manifest's saved spec."""
    known = {f.name: f for f in spec_fields()}
    unknown = [k for k in values if k not in known]
    if unknown:
        raise UsageError(f"{source}: unknown field {brief_repr(unknown[0])} in its spec")
    return {k: convert(known[k], v) for k, v in values.items()}


def auto_backend(backend: str, use_gpus: bool) -> str:
    """--backend auto: nccl when every rank has a GPU, else gloo; nccl without GPUs is refused."""
    if backend == "nccl" and not use_gpus:
        raise UsageError("--backend nccl: the cluster has no GPU")
    return backend if backend != "auto" else ("nccl" if use_gpus else "gloo")


def for_backend(spec: SweepSpec, backend: str) -> SweepSpec:
    """The spec as the resolved backend runs it: `-d all` becomes every dtype it supports (gloo:
    all but the float8 ones), and every dtype is checked against it."""
    if ALL in spec.dtypes:
        every = tuple(d for d in ELEMENT_BYTES if d in BACKEND_DTYPES[backend])
        dtypes = tuple(dict.fromkeys(e for d in spec.dtypes for e in (every if d == ALL else (d,))))
        spec = dataclasses.replace(spec, dtypes=dtypes)
    message = unsupported_pair(backend, list(spec.dtypes))  # --backend auto: checked once it is known
    if message:
        raise UsageError(message)
    if spec.cuda_graph and backend != "nccl":
        raise UsageError(f"{_flag('cuda_graph')}: the cluster runs {backend} (no GPU on every rank): no CUDA graph")
    return spec
