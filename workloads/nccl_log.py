"""NCCL's own account of what it used, read from its debug log (torch-free).

Each GPU worker asks NCCL for INFO lines of the INIT, NET, GRAPH, ENV and REG subsystems in a file of its
own (`configure`), and reads what a group appended (`read_since`). `parse` turns lines into an
`NcclLog`: the version banner of the library really loaded, `Using network X`, the devices and
interfaces of NET/IB and NET/Socket, the libfabric provider, every `Channel ... via PATH` line,
NVLS set-up and the ring graph's intra-node link type; and the build NCCL ran with (`build_facts`):
its git hash, the network, tuner and profiler plugins it loaded, the CTA policy the environment set
and the kinds of user buffers it registered. Each worker's file is its own (%p), so
no other process' lines are spliced into its lines. Some of those lines NCCL prints once per
process, not once per communicator (`PROCESS_WIDE`): `DebugFile` keeps them from the worker's
first group and fills them into every later group's account. Formats from NCCL 2.9 to 2.30 and the
aws-ofi-nccl and GPUDirect-TCPX plugins (tests/fixtures/nccl holds real lines of each kind).
"""

from __future__ import annotations

import os
import re
import socket
import tempfile
from collections.abc import Iterable
from dataclasses import replace

from workloads.messages import NcclLog

_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)\S*\+cuda")
_NETWORK = re.compile(r"NCCL INFO Using network (.+?)\s*$")
_IB = re.compile(r"NET/IB ?: Using (.*?);")
_IB_DEVICE = re.compile(r"\[\d+\]\S+?:\d+/(IB|RoCE)")
_SOCKET = re.compile(r"NET/Socket ?: Using (.*)$")
_SOCKET_IF = re.compile(r"\[\d+\]([^:\s]+):")
_PROVIDER = re.compile(r"NET/OFI Selected [Pp]rovider is (\w+)")
_CHANNEL = re.compile(r"Channel \d+(?:/\d+)? : (\d+)\[[0-9a-f]+\] -> (\d+)\[[0-9a-f]+\] (?:\[\w+\] )?via (.+?)\s*$")
_NVLS = re.compile(r"NVLS comm 0x|Connected NVLS")
_PATTERN = re.compile(r"Pattern \d+, crossNic \d+, nChannels \d+, bw [\d.]+/[\d.]+, type (\w+)/\w+")
_WARN = re.compile(r"NCCL WARN (.+?)\s*$")
# The build (NCCL 2.18 to 2.30 source, src/init.cc, src/plugin/*.cc, src/transport/*.cc):
_GIT = re.compile(r"NCCL INFO NCCL git version (?:\S+ )?(\S+)\s*$")  # "NCCL git version <branch> <hash>" (2.29+)
_NET_PLUGIN = re.compile(r"NET/Plugin: Loaded net plugin (.+?)\s*$")  # "Libfabric (v11)", 2.18 to 2.30
_NET_INTERNAL = re.compile(r"NET/Plugin ?: (?:Using internal|No plugin found|Could not find:.*Using internal)")
_NET_RELEASE = re.compile(r"NET/OFI Initializing (aws-ofi-nccl \S+)")
# 2.24+: "Using nccl_ofi_tuner (v3)"; 2.21-2.23: "Using tuner plugin X", "Using internal tuner plugin.",
# "Could not find: libnccl-tuner.so. Using internal tuner plugin.", "Failed to find ..., using internal tuner instead."
_TUNER = re.compile(r"TUNER/Plugin: (?:Could not find:.*?\. )?Using (?:(internal) tuner plugin\.?|tuner plugin (.+?)|(.+?))\s*$"
                    r"|TUNER/Plugin: Failed to find .*(internal) tuner")
_PROFILER = re.compile(r"PROFILER/Plugin: [Ll]oaded (.+?)\s*$")  # 2.27+ "Loaded X (v5)", 2.23-2.26 "loaded X"
# 2.29+ "Parsed environment variable NCCL_CTA_POLICY=EFFICIENCY to 1"; 2.27-2.28 "NCCL_CTA_POLICY set by environment to 1."
_CTA = re.compile(r"NCCL_CTA_POLICY(?:=\S+ to | set by environment to )(\d+)")
_CTA_BITS = ((1, "EFFICIENCY"), (2, "ZERO"))  # nccl.h: NCCL_CTA_POLICY_DEFAULT 0, _EFFICIENCY 1, _ZERO 2
# a user buffer registered (REG subsystem; NVLS up to 2.21): "rank 3 - NET register userbuff", "IPC registered
# buffer", "IPC local register buffer", "COLLNET reuse register userbuff", "successfully registered NVLS sendbuff",
# "successfully local-registered NVLS", 2.19's NVLS-only "successfully graph-registered sendbuff", "registered collNet"
_REGISTERED = re.compile(r"rank \d+ - (IPC|NET|COLLNET) (?:reuse |local |graph )?register(?:ed)? (?:buffer|userbuff)"
                         r"|rank \d+ - (IPC) reuse buffer"
                         r"|rank \d+ (?:successfully|reuse) (?:local-|graph-)?registered (NVLS|collNet)?")

# ENV for the CTA policy and 2.21-2.23's tuner line; REG for buffer registration (a line per buffer
# registered, none when nothing is)
SUBSYSTEMS = ("INIT", "NET", "GRAPH", "ENV", "REG")

# NcclLog fields that NCCL prints once per process, whatever the number of communicators: the
# version banner (`pthread_once(&once, showVersion)`), `NET/IB : Using ...` (only while the device
# list is uninitialised), `NET/Socket : Using ...` (once), and aws-ofi-nccl's `Selected provider
# is efa` (its init returns early when `netRefCount++ > 0`). `Using network X`, the channels, NVLS
# and the ring graph are printed for every communicator. The build: `NCCL git version` comes from
# showVersion, with the banner; the plugins are loaded once and kept while any communicator holds
# them (the net plugin up to 2.25 in ncclInit, guarded by `initialized`, from 2.26 on the first
# communicator; the tuner's and profiler's `status` and refcount), so a later group prints them
# again only if every earlier communicator was destroyed and the library reloaded (the net plugin:
# never in 2.26-2.27, NCCL_NET_PLUGIN_REF_COUNT 1 by default; possible from 2.28, where it is 0);
# aws-ofi-nccl's `Initializing` is behind its netRefCount; the CTA policy line is printed once (2.29+
# `std::call_once(onceEnvCtaPolicy, ...)`, 2.27-2.28 NCCL_PARAM's cached value). Registered buffers
# are a communicator's own.
PROCESS_WIDE = ("version", "link_layers", "interfaces", "provider", "git_hash", "net_plugin", "net_plugin_release",
                "tuner_plugin", "profiler_plugin", "cta_policy")


def parse(lines: Iterable[str]) -> NcclLog:
    version = network = provider = intra_link = None
    layers: dict[str, None] = {}
    interfaces: dict[str, None] = {}
    channels: dict[tuple[int, int, str], None] = {}
    warnings: list[str] = []
    nvls = False
    build: dict[str, str] = {}
    registered: dict[str, None] = {}
    for line in lines:
        if _build_fact(line, build, registered):
            continue
        if m := _VERSION.search(line):
            version = version or m.group(1)
        elif m := _NETWORK.search(line):
            network = m.group(1)
        elif m := _IB.search(line):
            layers.update(dict.fromkeys(_IB_DEVICE.findall(m.group(1))))
        elif m := _SOCKET.search(line):
            interfaces.update(dict.fromkeys(_SOCKET_IF.findall(m.group(1))))
        elif m := _PROVIDER.search(line):
            provider = m.group(1)
        elif m := _CHANNEL.search(line):
            channels[(int(m.group(1)), int(m.group(2)), m.group(3))] = None
        elif _NVLS.search(line):
            nvls = True
        elif m := _PATTERN.search(line):
            intra_link = intra_link or m.group(1)
        elif m := _WARN.search(line):
            warnings.append(m.group(1))
    return NcclLog(version, network, tuple(layers), tuple(interfaces), provider, tuple(channels), nvls, intra_link,
                   tuple(warnings), registered=tuple(sorted(registered)), **build)


def _build_fact(line: str, build: dict[str, str], registered: dict[str, None]) -> bool:
    """Read one line's build fact into `build` (NcclLog field -> value, the first seen kept) or its
    registered buffer's kind into `registered`; whether the line was one."""
    if m := _GIT.search(line):
        build.setdefault("git_hash", m.group(1))
    elif m := _NET_PLUGIN.search(line):  # after a name that was not found ("No plugin found (name)", up to 2.22)
        if build.get("net_plugin") in (None, "internal"):
            build["net_plugin"] = m.group(1)
    elif _NET_INTERNAL.search(line):
        build.setdefault("net_plugin", "internal")
    elif m := _NET_RELEASE.search(line):
        build.setdefault("net_plugin_release", m.group(1))
    elif m := _TUNER.search(line):
        build.setdefault("tuner_plugin", "internal" if m.group(1) or m.group(4) else m.group(2) or m.group(3))
    elif m := _PROFILER.search(line):
        build.setdefault("profiler_plugin", m.group(1))
    elif m := _CTA.search(line):
        bits = int(m.group(1))
        build.setdefault("cta_policy", "|".join(name for bit, name in _CTA_BITS if bits & bit) or "DEFAULT")
    elif m := _REGISTERED.search(line):
        kind = next(g for g in (*m.groups(), "NVLS") if g is not None)  # 2.19's graph-registered: NVLS
        registered[kind.upper()] = None
    else:
        return False
    return True


def with_process_facts(log: NcclLog, known: NcclLog) -> NcclLog:
    """`log` with each process-wide fact it does not show taken from `known`."""
    return replace(log, **{field: getattr(log, field) or getattr(known, field) for field in PROCESS_WIDE})


class DebugFile:
    """One worker process' NCCL debug file, read group by group. `facts` holds the process-wide
    facts (PROCESS_WIDE) as first seen in any group's lines; every group's account gets them."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.facts = NcclLog()
        self._offset = 0  # where the current group's lines start

    def start_group(self) -> None:
        """A new group starts: later reads see only its lines. What earlier groups logged since
        their last read still yields its process-wide facts."""
        lines, self._offset = read_since(self.path, self._offset)
        self._remember(lines)

    def group_log(self) -> NcclLog:
        """The current group's account: what NCCL logged since it started, with the process'
        facts where its own lines lack them."""
        log = self._remember(read_since(self.path, self._offset)[0])
        return with_process_facts(log, self.facts)

    def _remember(self, lines: list[str]) -> NcclLog:
        log = parse(lines)
        self.facts = with_process_facts(self.facts, log)
        return log


def configure(env: dict[str, str]) -> str:
    """Ask NCCL (through `env`, before its first call in this process) for INFO lines of
    SUBSYSTEMS in a file of this process; keep a user's more verbose level, wider subsystems
    (an inverted list, `^COLL,P2P`, loses only ours from what it leaves out: NCCL reads every name
    after `^` as excluded) and own file, made one per process where it names none (`%p` added before
    its extension: every worker of a node writing one file truncates the others' lines). Returns the
    file's path as NCCL will name it."""
    if env.get("NCCL_DEBUG", "").upper() not in ("INFO", "TRACE"):
        env["NCCL_DEBUG"] = "INFO"
    given = env.get("NCCL_DEBUG_SUBSYS", "").strip()
    if given.startswith("^"):  # NCCL's inverted list: every subsystem but these; ours must not be among them
        kept = [s for s in given[1:].split(",") if s and s.strip().upper() not in SUBSYSTEMS]
        env["NCCL_DEBUG_SUBSYS"] = "^" + ",".join(kept)  # "^" alone: every subsystem
    else:
        subsys = [s for s in given.split(",") if s]
        if "ALL" not in (s.upper() for s in subsys):
            env["NCCL_DEBUG_SUBSYS"] = ",".join(dict.fromkeys([*subsys, *SUBSYSTEMS]))
    pattern = env.get("NCCL_DEBUG_FILE") or os.path.join(tempfile.gettempdir(), DEFAULT_FILE)
    if "%p" not in pattern.replace("%%", ""):
        root, ext = os.path.splitext(pattern)
        pattern = f"{root}.%p{ext}"
    env["NCCL_DEBUG_FILE"] = pattern
    return debug_file_path(pattern, socket.gethostname(), os.getpid())


DEFAULT_FILE = "collbench-nccl.%h.%p.log"  # in the temporary folder, where the user names no NCCL_DEBUG_FILE


def remove_stale(folder: str, hostname: str, alive=lambda pid: os.path.exists(f"/proc/{pid}")) -> list[str]:
    """Remove the debug files collbench's own pattern (DEFAULT_FILE) gave processes of this host
    that are gone, and return their paths: a watch starts new workers every cycle, whose files
    would pile up in the temporary folder. A user's own NCCL_DEBUG_FILE is never touched."""
    host = re.escape(hostname.split(".")[0])
    name = re.compile(re.escape(DEFAULT_FILE).replace("%h", host).replace("%p", r"(\d+)") + "$")
    removed = []
    try:
        entries = os.listdir(folder)
    except OSError:
        return removed
    for entry in entries:
        m = name.match(entry)
        if m and not alive(int(m.group(1))):
            try:
                os.remove(os.path.join(folder, entry))
                removed.append(os.path.join(folder, entry))
            except OSError:  # another worker of this node removed it first
                pass
    return removed


def debug_file_path(pattern: str, hostname: str, pid: int) -> str:
    """NCCL_DEBUG_FILE as NCCL expands it: %h the host name up to its first dot, %p the pid."""
    out, i = [], 0
    while i < len(pattern):
        if pattern[i] == "%" and i + 1 < len(pattern):
            code = pattern[i + 1]
            out.append({"h": hostname.split(".")[0], "p": str(pid), "%": "%"}.get(code, "%" + code))
            i += 2
        else:
            out.append(pattern[i])
            i += 1
    return "".join(out)


def read_since(path: str, offset: int) -> tuple[list[str], int]:
    """Lines appended to `path` since `offset`, and the new offset ([] while there is no file)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return [], offset
    return data.decode(errors="replace").splitlines(), offset + len(data)
