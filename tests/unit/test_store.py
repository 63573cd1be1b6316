import datetime as dt

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from orchestrator.errors import UsageError
from orchestrator.results import dataset
from orchestrator.results.location import check_writable
from orchestrator.results.schema import ROW_SCHEMA, SCHEMA_VERSION, rows_table
from orchestrator.results.store import ResultStore


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
    assert dataset.manifest(str(tmp_path / "res"), "run-a")["spec"] == "{}"
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


def _readers(root: str) -> dict[str, int]:
    """Rows seen by the four obvious readers of a results folder."""
    import duckdb
    import polars as pl

    return {
        "pandas": len(pd.read_parquet(root)),
        "pyarrow": ds.dataset(root).count_rows(),
        "duckdb": duckdb.sql(f"SELECT count(*) FROM '{root}/**/*.parquet'").fetchall()[0][0],
        "polars": pl.scan_parquet(f"{root}/**/*.parquet").select(pl.len()).collect().item(),
    }


def test_every_reader_sees_each_row_once_before_and_after_compaction(tmp_path):
    root = str(tmp_path / "res")
    store = ResultStore(root, "run-a")
    store.create()
    for g in range(5):
        store.write_group(f"r0-g{g}", [{**_row(i), "group_id": f"r0-g{g}"} for i in range(3)])
    store.write_manifest({"state": "finished", "spec": "{}"})
    # plots where `collbench report --plots` puts them by default, inside the dataset
    (tmp_path / "res" / "_plots").mkdir()
    (tmp_path / "res" / "_plots" / "busbw.png").write_bytes(b"\x89PNG\r\n")
    assert _readers(root) == dict.fromkeys(["pandas", "pyarrow", "duckdb", "polars"], 15)
    # a user's own CSV beside the rows: pandas and pyarrow would try it as Parquet; collbench
    # ignores it (and so do the glob readers)
    (tmp_path / "res" / "summary.csv").write_text("a,b\n1,2\n")
    assert len(dataset.load(root)) == 15
    (tmp_path / "res" / "summary.csv").unlink()
    assert store.compact() == 5
    assert sorted(p.name for p in (tmp_path / "res" / "run-a").iterdir()) == ["part-00000.parquet"]
    assert _readers(root) == dict.fromkeys(["pandas", "pyarrow", "duckdb", "polars"], 15)
    assert store.finished_groups() == {f"r0-g{g}" for g in range(5)}  # --resume still knows them
    assert not any(p.name.startswith(".") for p in (tmp_path / "res").iterdir())  # no staging left


def test_a_group_file_replaces_its_rows_in_part_files(tmp_path):
    """Groups measured again after a compaction (--resume --retry-failed): the group file wins in
    collbench's reader, and the next compaction folds it in."""
    root = str(tmp_path / "res")
    store = ResultStore(root, "run-a")
    store.create()
    for g in range(3):
        store.write_group(f"r0-g{g}", [{**_row(0), "group_id": f"r0-g{g}", "status": "failed"}])
    store.compact()
    store.write_group("r0-g1", [{**_row(0), "group_id": "r0-g1", "status": "ok"}, {**_row(1), "group_id": "r0-g1"}])
    df = dataset.load(root)
    assert sorted(zip(df.group_id, df.status)) == [("r0-g0", "failed"), ("r0-g1", "ok"), ("r0-g1", "ok"),
                                                   ("r0-g2", "failed")]
    assert store.compact() == 1
    assert _readers(root)["pandas"] == 4 and len(dataset.load(root)) == 4


def test_older_and_foreign_files(tmp_path):
    """A schema_version 1 file (no transport columns) is read with those columns null; a Parquet
    file without schema_version is not ours and is ignored; a newer version is refused."""
    root = tmp_path / "res"
    (root / "old").mkdir(parents=True)
    v1 = rows_table([_row(0)]).drop_columns(["gpu_model", "nccl_version", "net_transport", "intra_transport",
                                              "time_us_batch", "busbw_gbps_batch"])
    v1 = v1.set_column(0, "schema_version", pa.array([1], pa.int32()))
    pq.write_table(v1, root / "old" / "g.parquet")
    pq.write_table(pa.table({"x": [1, 2]}), root / "export.parquet")
    df = dataset.load(str(root))
    assert len(df) == 1 and df.schema_version.iloc[0] == 1 and df.nccl_version.isna().all()
    pq.write_table(pa.table({"schema_version": pa.array([3], pa.int32()), "run_id": ["x"]}), root / "new.parquet")
    with pytest.raises(UsageError, match="schema_version 3 is newer than this collbench reads"):
        dataset.load(str(root))


@pytest.mark.parametrize("left", ["parts half-written", "group files after the exchange"])
def test_a_compaction_that_was_killed_leaves_nothing_in_the_way(tmp_path, left):
    """A driver killed during compaction leaves the staging folder; the next compaction (after
    --resume) clears it instead of failing on it, and every row is read once."""
    root = str(tmp_path / "res")
    store = ResultStore(root, "run-a")
    store.create()
    for g in range(3):
        store.write_group(f"r0-g{g}", [{**_row(0), "group_id": f"r0-g{g}"}])
    staging = tmp_path / "res" / ".run-a.compacting"
    staging.mkdir()
    name = "part-00000.parquet" if left == "parts half-written" else "r0-g0.parquet"
    (staging / name).write_bytes(b"PAR1 cut short")
    assert len(pd.read_parquet(root)) == 3  # the hidden folder is skipped (duckdb's glob would not)
    assert store.compact() == 3
    assert not staging.exists()
    assert len(dataset.load(root)) == 3 and store.finished_groups() == {"r0-g0", "r0-g1", "r0-g2"}


def test_run_states_are_the_manifests_words():
    """RunState replaced bare strings: a manifest, a RunResult printed or dumped, reads as before."""
    import json

    from orchestrator.results.schema import RunState

    assert [s.value for s in RunState] == ["running", "finished", "interrupted", "failed"]
    assert json.dumps({"state": RunState.FINISHED}) == '{"state": "finished"}'
    assert str(RunState.INTERRUPTED) == f"{RunState.INTERRUPTED}" == "interrupted" == RunState.INTERRUPTED


def test_the_manifest_file_nests_its_json_and_reads_back_as_before(tmp_path):
    """Issue 45: the manifest embedded JSON as strings (`"spec": "{\\"collectives\\": ...}"`); now a
    field holding JSON is nested in the file (jq .spec.iters), read back as the same string
    readers parse, and a file of the old form still reads."""
    import json

    spec = {"collectives": ["all_reduce"], "iters": 20}
    doctor = {"10.0.0.1": {"hostname": "a", "ray": "2.60.0"}}
    (tmp_path / "res" / "_runs").mkdir(parents=True)
    store = ResultStore(str(tmp_path / "res"), "run-a")
    store.write_manifest({"state": "finished", "spec": json.dumps(spec), "doctor": json.dumps(doctor),
                          "expected": None, "sources": "not json"})
    raw = json.loads((tmp_path / "res" / "_runs" / "run-a.json").read_text())
    assert (raw["spec"], raw["doctor"], raw["expected"], raw["sources"]) == (spec, doctor, None, "not json")
    back = dataset.manifest(str(tmp_path / "res"), "run-a")
    assert (json.loads(back["spec"]), json.loads(back["doctor"]), back["expected"], back["sources"]) == \
        (spec, doctor, None, "not json")
    old = {"schema_version": 2, "run_id": "run-b", "state": "finished", "spec": json.dumps(spec)}
    (tmp_path / "res" / "_runs" / "run-b.json").write_text(json.dumps(old))
    assert json.loads(dataset.manifest(str(tmp_path / "res"), "run-b")["spec"]) == spec
