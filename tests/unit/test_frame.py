"""The report's frame: node codes, host labels and group codes read back to the rows they came
from, and the same categoricals whether the table came as Arrow dictionaries or as strings."""

import pandas as pd
import pyarrow.compute as pc

from orchestrator.analysis.frame import DICTIONARY, Frame
from orchestrator.results.schema import rows_table


def _rows() -> list[dict]:
    # nodes first seen in the order b, a, c; groups in the order g2, g10, g1
    return [{"run_id": "r", "group_id": "g2", "collective": "all_reduce", "status": "ok", "topology": "inter",
             "node_ips": ["10.0.0.2", "10.0.0.1"], "hosts": ["hb", "ha"], "ranks": [0, 1], "local_ranks": [0, 0]},
            {"run_id": "r", "group_id": "g10", "collective": "broadcast", "status": "ok", "topology": "inter",
             "node_ips": ["10.0.0.3", "10.0.0.1"], "hosts": ["hc", "ha"], "ranks": [2, 1], "local_ranks": [1, 0]},
            {"run_id": "r", "group_id": "g1", "collective": "all_gather", "status": "failed", "topology": "intra",
             "node_ips": ["10.0.0.3", "10.0.0.3"], "hosts": ["", ""], "ranks": [2, 3], "local_ranks": [1, 2]},
            {"run_id": "r", "group_id": "g2", "collective": "all_reduce", "status": "ok", "topology": "inter",
             "node_ips": ["10.0.0.2", "10.0.0.1"], "hosts": ["hb", "ha"], "ranks": [0, 1], "local_ranks": [0, 0]}]


def _check(frame: Frame) -> None:
    df = frame.df
    assert frame.nodes == ["10.0.0.2", "10.0.0.1", "10.0.0.3"]
    assert frame.labels == ["hb (10.0.0.2)", "ha (10.0.0.1)", "hc (10.0.0.3)"]
    assert [frame.ips([a, b]) for a, b in zip(df.node_first, df.node_last)] == [
        ["10.0.0.2", "10.0.0.1"], ["10.0.0.3", "10.0.0.1"], ["10.0.0.3", "10.0.0.3"], ["10.0.0.2", "10.0.0.1"]]
    assert [frame.group_id(int(g)) for g in df.group] == ["g2", "g10", "g1", "g2"]
    assert df.group[0] == df.group[3] != df.group[1]
    assert list(df.local_first) == [0, 1, 1, 0] and list(df.local_last) == [0, 0, 2, 0]
    for c in ("collective", "status", "topology", "run_id"):  # categoricals, their categories sorted
        assert isinstance(df[c].dtype, pd.CategoricalDtype) and list(df[c].cat.categories) == sorted(set(df[c]))
    assert list(df.collective) == ["all_reduce", "broadcast", "all_gather", "all_reduce"]
    assert list(df.groupby("collective", observed=True).size().index) == ["all_gather", "all_reduce", "broadcast"]
    assert frame.lists(1)["hosts"] == ["hc", "ha"]


def test_codes_and_labels_read_back_from_strings_and_from_dictionaries():
    table = rows_table(_rows())
    _check(Frame(table))
    for name in DICTIONARY:
        i = table.schema.get_field_index(name)
        table = table.set_column(i, name, pc.dictionary_encode(table.column(i)))
    _check(Frame(table))
