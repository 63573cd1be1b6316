"""NCCL's own account of what it used, read from its debug log (torch-free).

Each GPU worker asks NCCL for INFO lines of the INIT, NET and GRAPH subsystems in a file of its
own (`configure`), and reads what a group appended (`read_since`). `parse` turns lines into an
`NcclLog`: the version banner of the library really loaded, `Using network X`, the devices and
interfaces of NET/IB and NET/Socket, the libfabric provider, every `Channel ... via PATH` line,
NVLS set-up and the ring graph's intra-node link type. Each worker's file is its own (%p), so
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

SUBSYSTEMS = ("INIT", "NET", "GRAPH")

# NcclLog fields that NCCL prints once per process, whatever the number of communicators: the
# version banner (`pthread_once(&once, showVersion)`), `NET/IB : Using ...` (only while the device
# list is uninitialised), `NET/Socket : Using ...` (once), and aws-ofi-nccl's `Selected provider
# is efa` (its init returns early when `netRefCount++ > 0`). `Using network X`, the channels, NVLS
# and the ring graph are printed for every communicator.
PROCESS_WIDE = ("version", "link_layers", "interfaces", "provider")


def parse(lines: Iterable[str]) -> NcclLog:
    version = network = provider = intra_link = None
    layers: dict[str, None] = {}
    interfaces: dict[str, None] = {}
    channels: dict[tuple[int, int, str], None] = {}
    warnings: list[str] = []
    nvls = False
    for line in lines:
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
                   tuple(warnings))


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
    """Ask NCCL (through `env`, before its first call in this process) for INFO lines of INIT,
    NET and GRAPH in a file of this process; keep a user's more verbose level, wider subsystems
    (an inverted list, `^COLL,P2P`, loses only ours from what it leaves out: NCCL reads every name
    after `^` as excluded) and own file. Returns the file's path as NCCL will name it."""
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
    pattern = env.setdefault("NCCL_DEBUG_FILE", os.path.join(tempfile.gettempdir(), "collbench-nccl.%h.%p.log"))
    return debug_file_path(pattern, socket.gethostname(), os.getpid())


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
