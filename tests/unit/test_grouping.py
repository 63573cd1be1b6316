"""analysis.grouping against pandas' own group-by, on random rows with null keys and values."""

import numpy as np
import pandas as pd
import pytest

from orchestrator.analysis import diagnosis, grouping


def _rows(seed: int, n: int = 3000) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    pick = lambda choices: rng.choice(np.array(choices, dtype=object), n)  # noqa: E731
    df = pd.DataFrame({
        "collective": pd.Categorical(pick(["all_reduce", "all_gather", None])),
        "in_place": rng.random(n) < 0.5,
        "world_size": rng.choice([2, 4, 8, 16], n).astype(np.int32),
        "msg_bytes": rng.choice([1 << 10, 1 << 20, 1 << 24, np.nan], n),
        "pattern": pick(["pairwise", "inter", None]),  # strings, not a categorical
        "value": np.where(rng.random(n) < 0.05, np.nan, rng.lognormal(0, 1, n)),
        "group": rng.integers(-1, 200, n),
    })
    return df


@pytest.mark.parametrize("seed", range(5))
def test_codes_number_the_keys_as_pandas_does(seed):
    df = _rows(seed)
    keys = ["collective", "in_place", "world_size", "msg_bytes", "pattern"]
    got, n = grouping.codes(df, keys)
    want = df.groupby(keys, sort=False, observed=True).ngroup().to_numpy()
    assert n == np.nanmax(want) + 1
    np.testing.assert_array_equal(got, np.where(np.isnan(want), -1, want).astype(np.int64))


@pytest.mark.parametrize("seed", range(5))
def test_with_nulls_as_values_codes_and_keys_are_pandas_own(seed):
    df = _rows(seed)
    keys = ["collective", "in_place", "world_size", "msg_bytes", "pattern"]
    got, n = grouping.codes(df, keys, dropna=False)
    by = df.groupby(keys, sort=False, dropna=False, observed=True)
    np.testing.assert_array_equal(got, by.ngroup().to_numpy())
    assert n == by.ngroups
    pd.testing.assert_frame_equal(grouping.keys(df[keys], got), by.head(1)[keys])


@pytest.mark.parametrize("seed", range(5))
def test_maxima_are_pandas_own(seed):
    df = _rows(seed)
    keys = ["collective", "world_size", "msg_bytes"]
    code, n = grouping.codes(df, keys)
    by = df.groupby(keys, sort=False, observed=True).value
    np.testing.assert_array_equal(grouping.maxima(code, df.value.to_numpy(), n), by.max().to_numpy())


def test_a_group_without_values_has_nan():
    code = np.array([0, 0, 1, 2, -1])
    values = np.array([1.0, 3.0, np.nan, 5.0, 9.0])
    np.testing.assert_array_equal(grouping.maxima(code, values, 4), [3.0, np.nan, 5.0, np.nan])


def test_firsts_marks_each_groups_first_row_among_those_kept():
    df = _rows(7)
    kept = df.value.notna().to_numpy()
    want = np.zeros(len(df), bool)
    want[df[kept].groupby("group", sort=False).head(1).index] = True
    np.testing.assert_array_equal(grouping.firsts(df.group.to_numpy(), kept), want)
    want[:] = False
    want[df.groupby("group", sort=False).head(1).index] = True
    np.testing.assert_array_equal(grouping.firsts(df.group.to_numpy()), want)


def test_codes_of_many_wide_keys_do_not_overflow():
    rng = np.random.default_rng(3)
    df = pd.DataFrame({f"k{i}": rng.integers(0, 5000, 2000) for i in range(8)})
    got, n = grouping.codes(df, list(df))
    want = df.groupby(list(df), sort=False).ngroup().to_numpy()
    assert n == want.max() + 1
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("labels", ["codes", "any integers", "strings"])
def test_the_peer_rule_judges_the_rows_pandas_group_by_chose(seed, labels):
    """diagnosis.shape_scores: each group's row at its shape's largest size, numbered by shape, as
    the pandas group-bys it replaced chose them; rows with a null key in no shape (every row in
    the last case, as in files written before a key column existed)."""
    rng = np.random.default_rng(seed)
    n = 4000
    df = pd.DataFrame({
        "collective": pd.Categorical(rng.choice(["all_reduce", "all_gather"], n)),
        "dtype": pd.Categorical(["float32"] * n), "op": pd.Categorical(["sum"] * n),
        "in_place": rng.random(n) < 0.5, "pattern": pd.Categorical(rng.choice(["pairwise", "inter"], n)),
        "world_size": rng.choice([2.0, 4.0, np.nan], n, p=[0.45, 0.45, 0.1]),
        "ranks_per_node": np.full(n, np.nan) if seed == 3 else np.ones(n),
        "msg_bytes": rng.choice([1 << 20, 1 << 22, 1 << 24] if seed != 2 else [2**53, 2**53 + 1, 2**53 + 2], n),
        "group": rng.integers(-1, 300, n),
        "status": pd.Categorical(rng.choice(["ok", "failed"], n, p=[0.95, 0.05])),
        "topology": pd.Categorical(["inter"] * n), "backend": pd.Categorical(["gloo"] * n),
        "busbw_gbps": rng.lognormal(0, 0.1, n), "node_first": rng.integers(0, 9, n),
        "node_last": rng.integers(0, 9, n), "local_first": np.zeros(n, int), "local_last": np.zeros(n, int),
    })
    if labels == "any integers":  # not a frame's codes: negative, and far apart
        df["group"] = (df.group - 1) * (1 << 40)
    elif labels == "strings":
        df["group"] = np.where(df.group < 0, None, df.group.astype(str))
    ok = df[df.status == "ok"]
    top = ok[ok.msg_bytes == ok.groupby(diagnosis.SHAPE, observed=True).msg_bytes.transform("max")]
    top = top.groupby("group", sort=False, observed=True).head(1)
    shape = top.groupby(diagnosis.SHAPE, sort=False, observed=True).ngroup().to_numpy()
    got = diagnosis.shape_scores(df)
    np.testing.assert_array_equal(got.index, top.index)
    np.testing.assert_array_equal(got.peers, np.bincount(shape, minlength=1)[shape] if len(shape) else [])
    assert (len(got) == 0) == (seed == 3)


def test_sizes_past_2_to_the_53_stay_apart():
    """Sizes as integers: 2**53 and 2**53 + 1 are two sizes (a float would merge them)."""
    df = pd.DataFrame({"shape": [0, 0, 0, 0], "size": np.array([2**53, 2**53 + 1, 2**53, 2**53 + 1])})
    code, n = grouping.codes(df, ["shape"])
    assert grouping.maxima(code, df["size"].to_numpy(), n)[0] == 2**53 + 1
    rows = pd.DataFrame({"a": pd.array([2**53, 2**53 + 1, None], dtype="Int64"), "b": [1, 1, 1]})
    np.testing.assert_array_equal(grouping.codes(rows, ["a", "b"])[0], [0, 1, -1])
    np.testing.assert_array_equal(grouping.codes(rows, ["a", "b"], dropna=False)[0], [0, 1, 2])
