"""The README's pandas and DuckDB snippets run against a written dataset and give the known answers."""

import os
import re
from pathlib import Path

import pytest

from orchestrator.results.store import ResultStore
from tests.synthetic import write_cluster_run

README = Path(__file__).resolve().parents[2] / "README.md"


def _snippets() -> list[str]:
    """Every Python snippet of the README: reading rows and the manifest, and the two questions."""
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


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
        exec(compile(code, "README.md", "exec"), ns)
    assert ns["manifest"]["state"] == "finished"
    assert ns["by_topology"]["intra"] > 3 * ns["by_topology"]["inter"]
    assert list(ns["worst_pair"]["node_ips"]) == ["10.0.0.12"] * 2 + ["10.0.0.15"] * 2
    assert [t for t, _ in ns["by_topology_sql"]] == ["inter", "intra", "mixed"]  # pairs of 2-rank nodes: mixed
    assert ns["by_topology_sql"][1][1] == pytest.approx(ns["by_topology"]["intra"])
    assert list(ns["worst_pair_sql"][0]) == ["10.0.0.12"] * 2 + ["10.0.0.15"] * 2
    assert ns["runs"] == [("20261129T120000Z-aaaaaa", "finished", "2.21.5")]
    assert os.path.isdir("results")
