"""One run's rows prepared for columnar analysis: scalar columns in pandas, list columns reduced
to what the diagnosis needs (first and last node of each group, first and last local rank) with
arrays, never as a Python object per row; a million rows load in about a second."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SCALARS = ["run_id", "started_at", "collective", "backend", "dtype", "op", "in_place", "msg_bytes", "count",
           "world_size", "n_nodes", "ranks_per_node", "topology", "pattern", "group_id", "status", "error", "time_us",
           "time_us_p50", "time_us_p99", "time_us_min",
           "busbw_gbps", "algbw_gbps", "n_wrong", "gpu_model", "nccl_version", "net_transport", "intra_transport",
           "platform", "step", "seq", "process_group", "trace_time_us", "traffic_source", "traffic_digest",
           "traffic_busiest_bytes", "traffic_busiest_rank", "traffic_heaviest_bytes"]
LISTS = ["ranks", "local_ranks", "hosts", "node_ips", "rank_time_us", "failed_ranks", "traffic_heaviest_pair",
         "traffic_rank_bytes"]
COLUMNS = SCALARS + LISTS


def _ends(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, flat values, first and last value of each list) of a list column."""
    arr = column.combine_chunks()
    offsets = arr.offsets.to_numpy()
    flat = arr.values
    first, last = offsets[:-1], np.maximum(offsets[1:] - 1, offsets[:-1])
    return offsets, flat, first, last


class Frame:
    """`df`: one row per result row with the scalar columns and node_first/node_last (codes into
    `nodes`, the node IPs), host labels, local_first/local_last (-1 where unknown); `table` keeps
    the list columns for the few rows that are flagged."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table
        self.df = table.select([c for c in SCALARS if c in table.column_names]).to_pandas()
        offsets, flat, first, last = _ends(table.column("node_ips"))
        encoded = pc.dictionary_encode(flat)
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        self.nodes: list[str] = encoded.dictionary.to_pylist()
        n = table.num_rows
        self.df["node_first"] = codes[first] if n else np.array([], int)
        self.df["node_last"] = codes[last] if n else np.array([], int)
        # a node's label: "host (ip)", from the first row that names it
        host_flat = table.column("hosts").combine_chunks().values.to_numpy(zero_copy_only=False)
        _, where = np.unique(codes, return_index=True)
        self.labels = [f"{host_flat[i]} ({self.nodes[codes[i]]})" if host_flat[i] else self.nodes[codes[i]]
                       for i in where]
        locals_ = table.column("local_ranks").combine_chunks()
        if locals_.null_count == n:  # results written before local_ranks existed
            self.df["local_first"] = self.df["local_last"] = -1
        else:
            loffs, lflat, lfirst, llast = _ends(table.column("local_ranks"))
            values = lflat.to_numpy(zero_copy_only=False)
            valid = loffs[1:] > loffs[:-1]
            self.df["local_first"] = np.where(valid, values[np.minimum(lfirst, len(values) - 1)], -1)
            self.df["local_last"] = np.where(valid, values[np.minimum(llast, len(values) - 1)], -1)
        self._offsets, self._codes = offsets, codes

    def replay_rows(self):
        """The replayed ops (pattern "replay") with their ranks, as a DataFrame."""
        mask = (self.df.pattern == "replay").to_numpy()
        rows = self.df[mask].copy()
        rows["ranks"] = [self.table.column("ranks")[int(i)].as_py() for i in mask.nonzero()[0]]
        return rows

    def node_codes(self, row: int) -> list[int]:
        """The distinct nodes of one row's group, in rank order."""
        return list(dict.fromkeys(self._codes[self._offsets[row]:self._offsets[row + 1]].tolist()))

    def ips(self, codes) -> list[str]:
        return [self.nodes[c] for c in codes]

    def label(self, code: int) -> str:
        return self.labels[code]

    def lists(self, row: int) -> dict:
        """The list columns of one row, as Python lists."""
        return {c: self.table.column(c)[row].as_py() for c in LISTS}

    def rank_times(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(row, global rank, rank's mean time, rank's node code) of every rank of `rows`, flattened."""
        times = self.table.column("rank_time_us").combine_chunks()
        ranks = self.table.column("ranks").combine_chunks()
        n = self.table.num_rows
        time_len, rank_len = np.diff(times.offsets.to_numpy()), np.diff(ranks.offsets.to_numpy())
        keep = np.zeros(n, bool)
        keep[rows] = True
        keep &= time_len == rank_len  # rows without per-rank times (not measured) have none
        keep &= np.diff(self._offsets) == rank_len  # a node for every rank
        t_owner, r_owner = np.repeat(np.arange(n), time_len), np.repeat(np.arange(n), rank_len)
        n_owner = np.repeat(np.arange(n), np.diff(self._offsets))
        return (t_owner[keep[t_owner]], ranks.values.to_numpy(zero_copy_only=False)[keep[r_owner]],
                times.values.to_numpy(zero_copy_only=False)[keep[t_owner]], self._codes[keep[n_owner]])
