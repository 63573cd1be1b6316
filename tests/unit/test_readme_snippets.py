"""The pandas and DuckDB snippets of docs/guides/results.md (moved there from the README) run against a
written dataset and give the known answers."""

import os
import re
from pathlib import Path

import pyarrow as pa
import pytest

from orchestrator.results.store import ResultStore
from tests.synthetic import write_cluster_run

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "results.md"


def _snippets() -> list[str]:
    """Every Python snippet of the page: reading rows and the manifest, and the two questions."""
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)


def test_readme_snippets_answer_both_questions(tmp_path, monkeypatch):
    pytest.importorskip("duckdb")
    # the default sweep's largest size (16M), a pairwise run, one slow pair, compacted as a run ends
    write_cluster_run(str(tmp_path / "results"), "20261129T120000Z-aaaaaa", nodes=6, ranks_per_node=2,
                      patterns=("intra", "inter", "pairwise"), sizes=[16, 4096, 1 << 20, 16 << 20],
                      faults=(("pair", 2, 5, 0.6),))
    store = ResultStore(str(tmp_path / "results"), "20261129T120000Z-aaaaaa")
    store.write_manifest({"state": "finished", "nccl_version": "2.21.5"})
    store.compact()
    monkeypatch.chdir(tmp_path)
    snippets = _snippets()
    assert len(snippets) == 3
    ns: dict = {}
    for code in snippets:
        exec(compile(code, "docs/guides/results.md", "exec"), ns)
    assert ns["manifest"]["state"] == "finished"
    assert ns["by_topology"]["intra"] > 3 * ns["by_topology"]["inter"]
    assert list(ns["worst_pair"].node_ips.iloc[0]) == ["10.0.0.12"] * 2 + ["10.0.0.15"] * 2
    assert [t for t, _ in ns["by_topology_sql"]] == ["inter", "intra", "mixed"]  # pairs of 2-rank nodes: mixed
    assert ns["by_topology_sql"][1][1] == pytest.approx(ns["by_topology"]["intra"])
    assert list(ns["worst_pair_sql"][0][0]) == ["10.0.0.12"] * 2 + ["10.0.0.15"] * 2
    assert ns["runs"] == [("20261129T120000Z-aaaaaa", "finished", "2.21.5")]
    assert os.path.isdir("results")


def test_the_snippets_run_on_a_one_node_run_after_a_qualify(tmp_path, monkeypatch):
    """Issue 45: on a one-node run the snippets raised (ValueError, IndexError: no node pair); and
    a qualify's probes, newer than the sweep, are not the run they read."""
    pytest.importorskip("duckdb")
    out = str(tmp_path / "results")
    write_cluster_run(out, "20261129T120000Z-aaaaaa", nodes=1, ranks_per_node=2, patterns=("intra",),
                      sizes=[16, 1 << 20])
    ResultStore(out, "20261129T120000Z-aaaaaa").write_manifest({"state": "finished", "nccl_version": "2.21.5"})
    write_cluster_run(out, "20261129T130000Z-qqqqqq", nodes=1, ranks_per_node=2, patterns=("intra",), sizes=[16],
                      minute=30, intra_gbps=1.0)
    probe = ResultStore(out, "20261129T130000Z-qqqqqq")
    import pyarrow.parquet as pq  # the probe's rows carry qualify's phase
    for path in (tmp_path / "results" / "20261129T130000Z-qqqqqq").glob("*.parquet"):
        table = pq.read_table(path)
        pq.write_table(table.set_column(table.schema.get_field_index("phase"), "phase",
                                        pa.array(["intra"] * table.num_rows, pa.string())), path)
    probe.write_manifest({"command": "qualify", "state": "finished"})
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    for code in _snippets():
        exec(compile(code, "docs/guides/results.md", "exec"), ns)
    # the sweep's 1M (not the probe's 16 bytes): 20 us + 1 MiB at 40 GB/s, all_reduce of 2 ranks (factor 1)
    assert dict(ns["by_topology"]) == {"intra": pytest.approx((1 << 20) / (20.0 + (1 << 20) / 40e3) / 1e3)}
    assert ns["worst_pair"].empty and ns["worst_pair_sql"] == []
    assert [t for t, _ in ns["by_topology_sql"]] == ["intra"]
