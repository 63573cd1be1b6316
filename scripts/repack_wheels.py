"""Repack downloaded wheels for the offline bundle (scripts/offline_bundle.sh): drop what collbench
never loads at run time, strip symbol tables from the largest native libraries, and store every
member uncompressed so that one solid xz pass over all wheels compresses them far better than
each wheel's own deflate does. Every wheel stays valid: its RECORD is rewritten with the new
hashes and sizes, so `pip install` checks them as usual.

    python scripts/repack_wheels.py SRC_DIR DEST_DIR

Prints one line per wheel that changed (members dropped, MiB before and after).
"""

from __future__ import annotations

import base64
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

MIB = 1 << 20


@dataclass(frozen=True)
class Prune:
    """What to leave out of one distribution's wheel, and whether to strip its native code."""

    drop: re.Pattern[str]
    """Members (paths inside the wheel) never imported by collbench, Ray's processes or pytest."""
    strip: bool = False
    """Strip symbol tables (`strip --strip-unneeded`): a third of Ray's and Arrow's C++ binaries
    is symbol names; what is left links and runs the same (crash back-traces lose function names)."""


def _paths(*prefixes: str) -> re.Pattern[str]:
    return re.compile("|".join(prefixes))


_STUBS = r".*\.pyi$"  # type stubs: read by type checkers, never imported


# Ray: Java (jars), RLlib, LLM, and the libraries on top of Ray Core (data, serve, train, tune, air,
# workflow) are imported by none of `ray start`, actors, ray.util.metrics or the dashboard agent
# (its modules for them load only when their import succeeds: ray/dashboard/utils.py); the
# dashboard's web client (8 MiB of JavaScript and source maps) is served only by a dashboard, which
# a bundle's Ray Core (no `ray[default]`: offline_bundle.sh) never starts.
# pyarrow: Flight, the S3, GCS, Azure and HDFS filesystems (pyarrow.fs imports each only
# if it can: an offline machine writes to local disk), and C++ headers/sources/tests;
# libarrow_python is shipped three times under its link names and only the SONAME (.so.NNNN) is
# loaded; ORC. pandas, numpy: their test suites; numpy's f2py, its C headers and `_simd` (a module
# for numpy's own tests of its SIMD dispatch). Type stubs everywhere.
PRUNES = {
    "ray": Prune(_paths(r"ray/(jars|rllib|llm|data|serve|train|tune|air|workflow)/", r"ray/dashboard/client/build/",
                        _STUBS), strip=True),
    "pyarrow": Prune(
        _paths(r"pyarrow/(include|includes|src|tests)/", r"pyarrow/.*flight[^/]*$",
               r"pyarrow/_pyarrow_cpp_tests", r"pyarrow/.*\.(pyx|pxd|pxi|h|cc)$",
               r"pyarrow/(_s3fs|_gcsfs|_azurefs|_hdfs|_orc|_dataset_orc)\.", r"pyarrow/libarrow_s3\.",
               r"pyarrow/libarrow_python[a-z_]*\.so(\.\d+\.\d+\.\d+)?$", _STUBS),
        strip=True,
    ),
    "pandas": Prune(_paths(r"pandas/tests/", _STUBS)),
    "numpy": Prune(_paths(r"numpy/(.+/)?tests/", r"numpy/f2py/", r"numpy/_core/_simd\.", r"numpy/_pyinstaller/",
                          r"numpy/_core/include/", _STUBS)),  # not stripped: strip breaks its patchelf-ed OpenBLAS
}


def _distribution(wheel: Path) -> str:
    return wheel.name.split("-")[0].lower().replace("_", "-").replace(".", "-")


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _stripped(data: bytes, scratch: Path) -> bytes:
    if not data.startswith(b"\x7fELF") or not shutil.which("strip"):
        return data
    path = scratch / "elf"
    path.write_bytes(data)
    done = subprocess.run(["strip", "--strip-unneeded", str(path)], check=False, capture_output=True, timeout=120)
    return path.read_bytes() if done.returncode == 0 else data


def repack(src: Path, dest: Path, scratch: Path) -> str | None:
    """Write `src` to `dest` stored (uncompressed), pruned and stripped per PRUNES, RECORD rewritten.
    Returns a line describing the change, or None when only the compression changed."""
    prune = PRUNES.get(_distribution(src))
    dropped, lines = 0, []
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest, "w", zipfile.ZIP_STORED) as zout:
        infos = [i for i in zin.infolist() if not i.is_dir()]
        record = next(i.filename for i in infos if re.fullmatch(r"[^/]+\.dist-info/RECORD", i.filename))
        for info in infos:
            name = info.filename
            if name == record or name.endswith(("/RECORD.jws", "/RECORD.p7s")):
                continue
            if prune and prune.drop.match(name):
                dropped += 1
                continue
            data = zin.read(info)
            if prune and prune.strip and info.file_size > MIB:
                data = _stripped(data, scratch)
            out = zipfile.ZipInfo(name, date_time=info.date_time)
            out.external_attr = info.external_attr  # keeps executables (raylet, gcs_server) executable
            zout.writestr(out, data, zipfile.ZIP_STORED)
            lines.append(_record_line(name, data))
        lines.append(f"{record},,")
        zout.writestr(zipfile.ZipInfo(record, date_time=(2020, 1, 1, 0, 0, 0)), "\n".join(lines) + "\n")
    if not prune:
        return None
    before = sum(i.file_size for i in infos) / MIB
    after = sum(i.file_size for i in zipfile.ZipFile(dest).infolist()) / MIB
    return f"{src.name}: {dropped} members dropped, {before:.0f} -> {after:.0f} MiB unpacked"


def main() -> int:
    if len(sys.argv) != 3:
        print("usage: repack_wheels.py SRC_DIR DEST_DIR", file=sys.stderr)
        return 2
    src_dir, dest_dir = Path(sys.argv[1]), Path(sys.argv[2])
    dest_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        for wheel in sorted(src_dir.glob("*.whl")):
            line = repack(wheel, dest_dir / wheel.name, Path(scratch))
            if line:
                print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
