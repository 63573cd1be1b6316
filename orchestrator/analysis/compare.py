"""Two runs row by row: busbw and time changes of matched rows, and rows found in one run only.
Pure; no Ray, no I/O."""

from __future__ import annotations

import pandas as pd

KEY = ["collective", "dtype", "op", "in_place", "msg_bytes", "topology", "world_size", "pattern"]


def compare(base: pd.DataFrame, new: pd.DataFrame, threshold: float) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(matched rows with changes, rows only in base, rows only in new)."""
    def agg(df: pd.DataFrame) -> pd.DataFrame:
        d = df[df.status == "ok"]
        return d.groupby(KEY).agg(busbw_gbps=("busbw_gbps", "median"), time_us=("time_us", "median")).reset_index()

    a, b = agg(base), agg(new)
    both = a.merge(b, on=KEY, how="outer", suffixes=("_base", "_new"), indicator=True)
    matched = both[both._merge == "both"].copy()
    matched["busbw_change"] = matched.busbw_gbps_new / matched.busbw_gbps_base - 1
    matched["time_change"] = matched.time_us_new / matched.time_us_base - 1
    matched["flag"] = matched.busbw_change < -threshold
    only_base = both[both._merge == "left_only"][KEY]
    only_new = both[both._merge == "right_only"][KEY]
    return matched.drop(columns="_merge"), only_base, only_new
