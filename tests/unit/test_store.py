import datetime as dt

import pandas as pd
import pyarrow.dataset as ds
import pytest

from orchestrator.errors import UsageError
from orchestrator.results.schema import ROW_SCHEMA, SCHEMA_VERSION
from orchestrator.results.store import ResultStore, check_writable


def _row(i: int) -> dict:
    return {
        "run_id": "run-a",
        "started_at": dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.timezone.utc),
        "collective": "all_reduce",
        "backend": "gloo",
        "dtype": "float32",
        "op": "sum",
        "in_place": True,
        "msg_bytes": 1024 * (i + 1),
        "count": 256 * (i + 1),
        "world_size": 2,
        "n_nodes": 1,
        "ranks_per_node": 2,
        "topology": "intra",
        "pattern": "intra",
        "group_id": "r0-g0",
        "round": 0,
        "groups_in_round": 1,
        "ranks": [0, 1],
        "hosts": ["a", "a"],
        "time_us": 10.0 + i,
        "busbw_gbps": 0.5 * i,
        "n_wrong": 0,
        "status": "ok",
        "iter_time_us": [10.0 + i, 11.0],
        "rank_time_us": [9.0, 10.5],
    }


def test_written_rows_read_back_equal(tmp_path):
    store = ResultStore(str(tmp_path / "res"), "run-a")
    store.create()
    rows = [_row(i) for i in range(3)]
    store.write_group("r0-g0", rows)
    store.write_group("r0-g1", [{**_row(5), "group_id": "r0-g1"}])
    store.write_manifest({"state": "running", "spec": "{}"})
    df = pd.read_parquet(tmp_path / "res")  # the manifest directory is skipped
    assert len(df) == 4
    df = df.sort_values(["group_id", "msg_bytes"]).reset_index(drop=True)
    for i in range(3):
        for key, value in rows[i].items():
            got = df.loc[i, key]
            assert (list(got) == value) if isinstance(value, list) else got == value, key
    assert (df["schema_version"] == SCHEMA_VERSION).all()
    assert ds.dataset(str(tmp_path / "res")).schema.equals(ROW_SCHEMA)
    assert store.finished_groups() == {"r0-g0", "r0-g1"}
    assert pd.read_parquet(tmp_path / "res" / "_runs").loc[0, "run_id"] == "run-a"
    # no temporary files are left behind
    assert sorted(p.name for p in (tmp_path / "res" / "run-a").iterdir()) == ["r0-g0.parquet", "r0-g1.parquet"]


def test_unwritable_outputs_are_refused(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UsageError, match="exists and is not a directory"):
        check_writable(str(blocker))
    with pytest.raises(UsageError, match="is not writable"):
        check_writable(str(blocker / "below"))
    check_writable(str(tmp_path / "new" / "deeper"))
    assert not (tmp_path / "new").exists()
