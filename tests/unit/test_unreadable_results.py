"""What report reads when a results folder holds broken or foreign files, and the shapes of its
output when something is missing (issue 26): a file it cannot read is named in one warning and the
rest is read; a corrupt manifest says so; empty CSV tables keep their header; the JSON run object
keeps every field."""

from __future__ import annotations

import io
import json
import os

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orchestrator.analysis import report
from tests.helpers import run_main
from tests.synthetic import write_cluster_run, write_run


@pytest.fixture
def results(tmp_path):
    out = str(tmp_path / "res")
    write_run(out, "r1", nodes=3)
    return out


def _rows_and_flags(proc) -> tuple[int, int]:
    rep = json.loads(proc.stdout)
    return sum(r["intra"] is not None for r in rep["tables"]["busbw"]), len(rep["flags"])


def test_a_foreign_or_truncated_parquet_file_is_named_once_and_the_rest_read(results):
    clean = run_main(["report", results, "--format", "json"])
    assert clean.stderr == ""
    # another tool's file whose run_id is an integer (pyarrow cannot cast it to our string column)
    foreign = os.path.join(results, "theirs.parquet")
    pq.write_table(pa.table({"run_id": [1, 2], "value": [0.5, 0.7]}), foreign)
    group_file = os.path.join(results, "r1", "intra-0.parquet")
    with open(group_file, "rb") as f:
        data = f.read()
    truncated = os.path.join(results, "r1", "torn.parquet")
    with open(truncated, "wb") as f:
        f.write(data[: len(data) // 2])
    proc = run_main(["report", results, "--format", "json"])
    assert proc.returncode == clean.returncode, proc.stderr
    warnings = proc.stderr.splitlines()
    assert len(warnings) == 2 and all(w.startswith("collbench: warning: ") for w in warnings)
    assert {w.split(": ")[2] for w in warnings} == {foreign, truncated}
    assert _rows_and_flags(proc) == _rows_and_flags(clean)  # every row of the run read


def test_a_folder_of_foreign_or_broken_files_only_is_one_line(tmp_path):
    pq.write_table(pa.table({"run_id": [1]}), tmp_path / "theirs.parquet")
    proc = run_main(["report", str(tmp_path)])
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert "no collbench result rows" in line
    (tmp_path / "torn.parquet").write_bytes(b"PAR1" + bytes(64))
    proc = run_main(["report", str(tmp_path)])
    (line,) = proc.stderr.splitlines()
    assert proc.returncode == 2 and "no collbench result rows" in line and "torn.parquet: skipped" in line


@pytest.mark.parametrize("text, why", [("{not json", "corrupt"), ("[1, 2]", "a JSON list, not an object"),
                                       ('{"run_id": "r1", "started_at": "yesterday"}', "corrupt")])
def test_a_corrupt_manifest_is_said_to_be_corrupt_and_the_rows_reported(results, text, why):
    os.makedirs(os.path.join(results, "_runs"), exist_ok=True)
    with open(os.path.join(results, "_runs", "r1.json"), "w") as f:
        f.write(text)
    proc = run_main(["report", results, "--format", "json"])
    assert proc.returncode == 0, proc.stderr  # a healthy run: no flag
    rep = json.loads(proc.stdout)
    (warning,) = [w for w in rep["warnings"] if "manifest" in w]
    assert "r1.json: the run's manifest is" in warning and why in warning and "no manifest" not in warning
    assert rep["tables"]["busbw"]


def test_a_manifest_without_a_spec_still_heads_the_report(results):
    os.makedirs(os.path.join(results, "_runs"), exist_ok=True)
    with open(os.path.join(results, "_runs", "r1.json"), "w") as f:
        json.dump({"run_id": "r1", "state": "finished", "collbench_version": "9.9"}, f)
    rep = json.loads(run_main(["report", results, "--format", "json"]).stdout)
    assert rep["run"]["state"] == "finished" and rep["run"]["collbench_version"] == "9.9"
    assert rep["run"]["torch_version"] is None


def test_the_json_run_object_keeps_every_field_as_null_without_a_manifest(results):
    rep = json.loads(run_main(["report", results, "--format", "json"]).stdout)
    assert set(report.RUN_FIELDS) <= set(rep["run"])
    assert rep["run"]["run_id"] == "r1" and all(rep["run"][k] is None for k in report.RUN_FIELDS if k != "run_id")
    text = run_main(["report", results]).stdout
    assert "collbench None" not in text and "torch None" not in text


def test_every_csv_table_has_its_header_and_empty_ones_read_as_no_rows(results, tmp_path):
    folder = tmp_path / "csv"
    proc = run_main(["report", results, "--format", "csv", "--csv-dir", str(folder)])
    assert proc.returncode == 0, proc.stderr  # a healthy run: no flag
    assert sorted(os.listdir(folder)) == sorted(f"{name}.csv" for name in report.COLUMNS)
    for name, columns in report.COLUMNS.items():
        df = pd.read_csv(folder / f"{name}.csv")
        if df.empty:
            assert list(df.columns) == list(columns), name
    assert pd.read_csv(folder / "dtypes.csv").empty  # one dtype measured
    proc = run_main(["report", results, "--format", "csv", "--table", "dtypes"])
    assert list(pd.read_csv(io.StringIO(proc.stdout)).columns) == list(report.COLUMNS["dtypes"])


def test_the_declared_columns_are_those_of_the_tables_with_rows(tmp_path):
    """The header of an empty table is declared apart from the code that makes the rows: every
    table this synthetic run fills must have exactly those columns (flags: at least)."""
    out = str(tmp_path / "res")
    mine = tmp_path / "expected.yaml"
    mine.write_text("- {collective: all_reduce, topology: inter, busbw_gbps: 10}\n"
                    "- {collective: all_reduce, topology: intra, busbw_gbps: 40}\n")
    write_cluster_run(out, "c", nodes=4, ranks_per_node=2, patterns=("intra", "inter", "pairwise"), platform="cpu",
                      failed_groups=("r1-g2",), faults=(("node_nic", 2, 0.5),))
    rep = json.loads(run_main(["report", out, "--format", "json", "--expected", str(mine)]).stdout)
    filled = {name: rows for name, rows in {**rep["tables"], "flags": rep["flags"]}.items() if rows}
    # a sweep of all_reduce: no replay, no uneven exchange (tests/integration/test_alltoallv.py fills that table)
    assert set(filled) >= set(report.COLUMNS) - {"dtypes", "replay_steps", "replay_groups", "all_to_allv"}
    for name, rows in filled.items():
        columns = list(dict.fromkeys(k for r in rows for k in r))
        if name == "flags":
            assert set(report.COLUMNS[name]) <= set(columns)
        else:
            assert columns == list(report.COLUMNS[name]), name


def test_csv_dir_needs_format_csv_and_a_folder_it_can_write(results, tmp_path):
    proc = run_main(["report", results, "--csv-dir", str(tmp_path / "csv")])
    assert proc.returncode == 2 and "--csv-dir" in proc.stderr and "only with --format csv" in proc.stderr
    assert not (tmp_path / "csv").exists()
    (tmp_path / "file").write_text("x")
    proc = run_main(["report", results, "--format", "csv", "--csv-dir", str(tmp_path / "file")])
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "cannot write there" in proc.stderr


def test_help_texts_say_what_the_checks_accept():
    assert "above" not in run_main(["run", "--help"]).stdout.split("--config YAML")[1].split("--")[0]
    assert "Pure functions" not in run_main(["predict", "--help"]).stdout
    qualify = run_main(["qualify", "--help"]).stdout
    assert "the one collective" in qualify and "or all" not in qualify
    said = " ".join(run_main(["lab", "up", "--help"]).stdout.split())
    assert "lower-case letters or digits, starting with a letter" in said
    proc = run_main(["lab", "up", "--node-link", "1=fast"])
    assert proc.returncode == 2 and proc.stderr.startswith("collbench: error: --node-link '1=fast'")
