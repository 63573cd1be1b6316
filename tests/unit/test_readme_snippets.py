"""The README's pandas and DuckDB snippets run against a written dataset and give the known answers."""

import os
import re
from pathlib import Path

import pytest

from tests.synthetic import write_run

README = Path(__file__).resolve().parents[2] / "README.md"


def _snippets() -> list[str]:
    section = README.read_text().split("## Reading the results elsewhere", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_readme_snippets_answer_both_questions(tmp_path, monkeypatch):
    pytest.importorskip("duckdb")
    write_run(str(tmp_path / "results"), "20261129T120000Z-aaaaaa", slow_pair=(2, 5), minute=0)
    monkeypatch.chdir(tmp_path)
    snippets = _snippets()
    assert len(snippets) == 2
    ns: dict = {}
    for code in snippets:
        exec(compile(code, "README.md", "exec"), ns)
    assert ns["by_topology"]["intra"] > 3 * ns["by_topology"]["inter"]
    assert list(ns["worst_pair"]["node_ips"]) == ["10.0.0.12", "10.0.0.15"]
    assert [t for t, _ in ns["by_topology_sql"]] == ["inter", "intra"]
    assert ns["by_topology_sql"][1][1] == pytest.approx(ns["by_topology"]["intra"])
    assert list(ns["worst_pair_sql"][0]) == ["10.0.0.12", "10.0.0.15"]
    assert os.path.isdir("results")
