"""Group-bys of several keys over a run's rows as integer codes, for the judges of a million rows:
each key column is coded on its own (a categorical's codes, a factorized column) and the codes
combined into one integer per row. Each function gives what pandas' group-by gives (a row with a
null key in no group, unless asked; nulls skipped), without the cost of pandas' group-by over
several keys: in a report's one pass, 0.3-0.4 s of CPU for each such group-by over a million rows,
most of it the first call's (measured: benchmarks/data/performance_history_2026-12.md, from section 4). Pandas' group-bys over
one key (medians) are as fast as numpy here and stay."""

from __future__ import annotations

import numpy as np
import pandas as pd

_SPAN = 1 << 40  # combined keys are re-coded before their product of sizes passes this


def codes(df: pd.DataFrame, columns: list[str], dropna: bool = True) -> tuple[np.ndarray, int]:
    """(each row's group among the distinct combinations of `columns`, numbered in the order they
    first appear; the number of groups). A null is in no group (-1), or with dropna=False a value."""
    key, span = np.zeros(len(df), np.int64), 1
    null = np.zeros(len(df), bool)
    for c in columns:
        column = df[c]
        if isinstance(column.dtype, pd.CategoricalDtype):
            part, size = column.cat.codes.to_numpy().astype(np.int64), len(column.cat.categories)
            if not dropna:  # a null is one more value
                part, size = np.where(part < 0, size, part), size + 1
        else:
            part, uniques = pd.factorize(column, use_na_sentinel=dropna)  # the Series: an Int64 stays exact
            part, size = part.astype(np.int64), len(uniques)
        null |= part < 0
        if span * max(size, 1) >= _SPAN:  # the distinct keys so far, numbered again from 0
            key = pd.factorize(key)[0].astype(np.int64)
            span = int(key.max(initial=0)) + 1
        key, span = key * max(size, 1) + np.maximum(part, 0), span * max(size, 1)
    key[null] = -1
    dense, uniques = pd.factorize(key)
    if null.any():  # -1 is one of the keys: its code goes, the others close up
        minus = int(np.flatnonzero(uniques == -1)[0])
        dense = np.where(dense > minus, dense - 1, dense)
        dense[null] = -1
        return dense, len(uniques) - 1
    return dense, len(uniques)


def keys(df: pd.DataFrame, group: np.ndarray) -> pd.DataFrame:
    """The first row of each group (`group`: codes numbered in the order they first appear), in
    group order."""
    return df[firsts(group, group >= 0)]


def maxima(group: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """The largest of `values` in each of the n groups, in their dtype (integers stay exact past
    2**53). Floats: NaN skipped, NaN where a group has none; integers: the dtype's least value there."""
    if values.dtype.kind in "iu":
        out = np.full(n, np.iinfo(values.dtype).min, dtype=values.dtype)
        keep = group >= 0
    else:
        values = values.astype(float, copy=False)
        out, keep = np.full(n, -np.inf), (group >= 0) & ~np.isnan(values)
    np.maximum.at(out, group[keep], values[keep])
    if out.dtype.kind == "f":
        out[np.isneginf(out)] = np.nan
    return out


def firsts(group: np.ndarray, where: np.ndarray | None = None) -> np.ndarray:
    """Whether each entry is the first of its group, among the entries `where` keeps (every one by
    default); an entry whose group is null is in none. Codes from -1 up (a frame's `group`) are
    counted as they are, any other labels factorized first."""
    inside = np.flatnonzero(where) if where is not None else np.arange(len(group))
    labels = np.asarray(group)[inside]
    if labels.dtype.kind in "iu" and len(labels) and labels.min() >= -1 and labels.max() < 2 * len(labels):
        code = labels.astype(np.int64) + 1  # -1 is a group of its own (a row without group_id)
    else:
        code = pd.factorize(labels)[0]  # a null: -1, in no group
    first = np.full(int(code.max(initial=0)) + 1, len(inside))
    counted = np.flatnonzero(code >= 0)
    np.minimum.at(first, code[counted], counted)
    out = np.zeros(len(group), bool)
    out[inside[first[first < len(inside)]]] = True
    return out
