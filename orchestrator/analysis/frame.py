"""One run's rows prepared for columnar analysis: scalar columns in pandas, list columns reduced
to what the diagnosis needs (first and last node of each group, first and last local rank) with
arrays, never as a Python object per row; a million rows load in about a second."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SCALARS = ["run_id", "started_at", "collective", "backend", "dtype", "op", "in_place", "msg_bytes", "count",
           "world_size", "n_nodes", "ranks_per_node", "topology", "pattern", "group_id", "status", "error", "time_us",
           "time_us_p50", "time_us_p99", "time_us_min", "time_us_max",
           "busbw_gbps", "algbw_gbps", "n_wrong", "gpu_model", "nccl_version", "net_transport", "intra_transport",
           "platform", "step", "seq", "process_group", "trace_time_us", "traffic_source", "traffic_digest",
           "traffic_busiest_bytes", "traffic_busiest_rank", "traffic_heaviest_bytes", "dispatch_floor_us"]
LISTS = ["ranks", "local_ranks", "hosts", "node_ips", "rank_time_us", "failed_ranks", "traffic_heaviest_pair",
         "traffic_rank_bytes", "scheduler_nodes"]
COLUMNS = SCALARS + LISTS
# the string columns that key the report's groupings, read as Arrow dictionaries (as Parquet holds
# them): categoricals in `df`, group_id as the integer codes `group`
DICTIONARY = ("run_id", "collective", "backend", "dtype", "op", "topology", "pattern", "group_id", "status", "error",
              "gpu_model", "nccl_version", "net_transport", "intra_transport", "platform", "process_group",
              "traffic_source", "traffic_digest")


def _dictionary(column: pa.ChunkedArray) -> pa.DictionaryArray:
    """A string column as one dictionary array (one dictionary for all its chunks)."""
    if not pa.types.is_dictionary(column.type):
        column = pc.dictionary_encode(column)
    return column.unify_dictionaries().combine_chunks()


def _ends(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, flat values, first and last value of each list) of a list column."""
    arr = column.combine_chunks()
    offsets = arr.offsets.to_numpy()
    flat = arr.values
    first, last = offsets[:-1], np.maximum(offsets[1:] - 1, offsets[:-1])
    return offsets, flat, first, last


class Frame:
    """`df`: one row per result row with the scalar columns (strings as categoricals; group_id as
    the integer code `group`, `group_id(code)` its name) and node_first/node_last (codes into
    `nodes`, the node IPs), host labels, local_first/local_last (-1 where unknown); `table` keeps
    the list columns for the few rows that are flagged."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table
        n = table.num_rows
        scalars = table.select([c for c in SCALARS if c in table.column_names and c != "group_id"])
        for i, f in enumerate(scalars.schema):  # the same categoricals however the table was read
            if f.name in DICTIONARY and not pa.types.is_dictionary(f.type):
                scalars = scalars.set_column(i, f.name, _dictionary(scalars.column(i)))
        groups = _dictionary(table.column("group_id"))
        self._group_ids = groups.dictionary
        offsets, flat, first, last = _ends(table.column("node_ips"))
        encoded = pc.dictionary_encode(flat)
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        self.nodes: list[str] = encoded.dictionary.to_pylist()
        # a node's label: "host (ip)", from the first entry that names it (codes number the nodes in
        # the order they first appear: a new one is where the running maximum rises)
        rises = np.flatnonzero(np.r_[True, codes[1:] > np.maximum.accumulate(codes)[:-1]]) if len(codes) else []
        if len(rises) != len(self.nodes) or np.any(codes[rises] != np.arange(len(self.nodes))):
            rises = np.unique(codes, return_index=True)[1]  # an encoder that numbers otherwise: each code's first
        hosts = table.column("hosts").combine_chunks().values.take(pa.array(rises, pa.int64())).to_pylist()
        names = _scheduler_names(table)  # the name an operator drains by, where a scheduler gave one
        self.labels = [f"{names[ip]} ({h or '?'}, {ip})" if ip in names else f"{h} ({ip})" if h else ip
                       for h, ip in zip(hosts, self.nodes)]
        self.names = [(ip, h, names.get(ip)) for h, ip in zip(hosts, self.nodes)]  # (IP, host, scheduler name)
        self.leaves: dict[int, str] | None = None  # node code -> its leaf switch, where a topology is given
        self.parents: dict[str, str] = {}  # switch -> the switch above it (the tree's deeper levels)
        local_first = local_last = np.full(n, -1)
        if table.column("local_ranks").null_count < n:  # results written before local_ranks existed have none
            loffs, lflat, lfirst, llast = _ends(table.column("local_ranks"))
            values = lflat.to_numpy(zero_copy_only=False)
            valid = loffs[1:] > loffs[:-1]
            local_first = np.where(valid, values[np.minimum(lfirst, len(values) - 1)], -1)
            local_last = np.where(valid, values[np.minimum(llast, len(values) - 1)], -1)
        derived = {"group": groups.indices.fill_null(-1).to_numpy(zero_copy_only=False),
                   "node_first": codes[first] if n else np.array([], int),
                   "node_last": codes[last] if n else np.array([], int),
                   "local_first": local_first, "local_last": local_last}
        for name, values in derived.items():
            scalars = scalars.append_column(name, pa.array(values))
        self.df = scalars.to_pandas()
        for c in DICTIONARY:  # categories in sorted order, as grouping by the strings sorted them
            categories = self.df[c].cat.categories if c in self.df else None
            if categories is not None and not categories.is_monotonic_increasing:
                self.df[c] = self.df[c].cat.reorder_categories(sorted(categories))
        self._offsets, self._codes = offsets, codes

    def group_id(self, group: int) -> str | None:
        """The group_id of a group code (`df.group`)."""
        return self._group_ids[group].as_py() if group >= 0 else None

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
        node_len = np.diff(self._offsets)
        keep &= node_len == rank_len  # a node for every rank
        # each value of a list column kept where its row is (booleans repeated: no owner per value)
        return (np.repeat(np.flatnonzero(keep), time_len[keep]),
                ranks.values.to_numpy(zero_copy_only=False)[np.repeat(keep, rank_len)],
                times.values.to_numpy(zero_copy_only=False)[np.repeat(keep, time_len)],
                self._codes[np.repeat(keep, node_len)])


def _scheduler_names(table: pa.Table) -> dict[str, str]:
    """Node IP -> its name in the scheduler, from the rows that carry `scheduler_nodes` (Slurm's
    SLURMD_NODENAME, Kubernetes' node name); empty for rows written outside one, or before the column."""
    if "scheduler_nodes" not in table.column_names or table.column("scheduler_nodes").null_count == table.num_rows:
        return {}
    named = table.filter(pc.is_valid(table.column("scheduler_nodes")))
    pairs = pa.table({"ip": pc.list_flatten(named.column("node_ips")),
                      "name": pc.list_flatten(named.column("scheduler_nodes"))})
    pairs = pairs.filter(pc.is_valid(pairs.column("name"))).group_by(["ip", "name"]).aggregate([])
    return dict(zip(pairs.column("ip").to_pylist(), pairs.column("name").to_pylist()))
