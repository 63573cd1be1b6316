"""scripts/repack_wheels.py: pruned members are gone, the rest is byte-identical and stored, and
the rewritten RECORD names every member with its true sha256 and size (what pip checks)."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("repack_wheels", REPO / "scripts/repack_wheels.py")
repack_wheels = importlib.util.module_from_spec(spec)
sys.modules["repack_wheels"] = repack_wheels  # dataclasses look their module up there
spec.loader.exec_module(repack_wheels)

RAY_MEMBERS = {
    "ray/__init__.py": b"import ray._raylet\n",
    "ray/util/metrics.py": b"class Gauge: ...\n",
    "ray/jars/ray_dist.jar": b"PK" + bytes(100),
    "ray/rllib/__init__.py": b"raise ImportError\n",
    "ray/llm/x.py": b"",
    "ray/core/src/ray/raylet/raylet": b"#!/bin/sh\necho raylet\n",
    "ray/dashboard/modules/train/train_head.py": b"import ray.train\n",
}


def _wheel(path: Path, members: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o755 if name.endswith("raylet") else 0o644) << 16
            z.writestr(info, data)
        z.writestr("ray-2.60.0.dist-info/METADATA", "Name: ray\nVersion: 2.60.0\n")
        z.writestr("ray-2.60.0.dist-info/RECORD", "stale,sha256=x,1\n")
        z.writestr("ray-2.60.0.dist-info/RECORD.jws", "signature of the old RECORD")


def test_ray_wheel_pruned_stored_and_recorded(tmp_path: Path) -> None:
    src, dest = tmp_path / "ray-2.60.0-cp311-cp311-manylinux2014_x86_64.whl", tmp_path / "out.whl"
    _wheel(src, RAY_MEMBERS)
    line = repack_wheels.repack(src, dest, tmp_path)
    assert line is not None and "3 members dropped" in line

    with zipfile.ZipFile(dest) as z:
        names = set(z.namelist())
        kept = {n for n in RAY_MEMBERS if not n.startswith(("ray/jars/", "ray/rllib/", "ray/llm/"))}
        assert names == kept | {"ray-2.60.0.dist-info/METADATA", "ray-2.60.0.dist-info/RECORD"}
        assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist())
        assert z.getinfo("ray/core/src/ray/raylet/raylet").external_attr >> 16 == 0o755
        for name in kept:
            assert z.read(name) == RAY_MEMBERS[name]
        record = z.read("ray-2.60.0.dist-info/RECORD").decode().splitlines()
        rows = {r.split(",", 1)[0]: r.split(",", 1)[1] for r in record}
        assert set(rows) == names
        assert rows["ray-2.60.0.dist-info/RECORD"] == ","
        for name in names - {"ray-2.60.0.dist-info/RECORD"}:
            data = z.read(name)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert rows[name] == f"sha256={digest},{len(data)}"


def test_other_wheels_only_change_compression(tmp_path: Path) -> None:
    src, dest = tmp_path / "pyyaml-6.0-py3-none-any.whl", tmp_path / "out.whl"
    with zipfile.ZipFile(src, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("yaml/tests/__init__.py", "kept: only numpy, pandas and pyarrow lose their tests")
        z.writestr("pyyaml-6.0.dist-info/RECORD", "")
    assert repack_wheels.repack(src, dest, tmp_path) is None
    with zipfile.ZipFile(dest) as z:
        assert z.read("yaml/tests/__init__.py").startswith(b"kept")


def test_pyarrow_keeps_the_loaded_soname_only(tmp_path: Path) -> None:
    members = {f"pyarrow/{n}": b"\x00" for n in (
        "libarrow_python.so", "libarrow_python.so.2600", "libarrow_python.so.2600.1.0", "libarrow_flight.so.2600",
        "_flight.cpython-311-x86_64-linux-gnu.so", "include/arrow/api.h", "lib.pyx", "parquet/core.py",
        "libarrow_substrait.so.2600", "tests/test_io.py")}
    src, dest = tmp_path / "pyarrow-26.0.1-cp311-cp311-manylinux_2_28_x86_64.whl", tmp_path / "out.whl"
    with zipfile.ZipFile(src, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
        z.writestr("pyarrow-26.0.1.dist-info/RECORD", "")
    repack_wheels.repack(src, dest, tmp_path)
    with zipfile.ZipFile(dest) as z:
        assert {n for n in z.namelist() if not n.endswith("RECORD")} == {
            "pyarrow/libarrow_python.so.2600", "pyarrow/parquet/core.py", "pyarrow/libarrow_substrait.so.2600"}
