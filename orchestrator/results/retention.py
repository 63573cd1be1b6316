"""Retention of a results dataset kept by date (watch's `date=YYYY-MM-DD/` partitions): which
partitions are older than the days kept, and dropping them with their runs' manifests."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator


def expired(partitions: list[str], today: dt.date, keep_days: int) -> list[str]:
    """The `date=YYYY-MM-DD` partitions older than `keep_days` days before `today`."""
    out = []
    for name in partitions:
        try:
            day = dt.date.fromisoformat(name.removeprefix("date="))
        except ValueError:
            continue
        if name.startswith("date=") and (today - day).days > keep_days:
            out.append(name)
    return out


def drop_expired(output: str, today: dt.date, keep_days: int) -> Iterator[tuple[str, int]]:
    """Drop the partitions of `output` older than `keep_days` (their rows, and the manifests of the
    runs they held); (folder, runs) of each, as it is dropped (said even if a later one fails)."""
    import pyarrow.fs as pafs

    from orchestrator.results.location import MANIFEST_DIR, resolve

    fs, root = resolve(output)
    entries = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
    names = [e.base_name for e in entries if e.type == pafs.FileType.Directory]
    for name in expired(names, today, keep_days):
        folder = f"{root}/{name}"
        runs = [e.base_name for e in fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
                if e.type == pafs.FileType.Directory]
        fs.delete_dir(folder)
        for run_id in runs:
            try:
                fs.delete_file(f"{root}/{MANIFEST_DIR}/{run_id}.json")
            except (FileNotFoundError, OSError):
                pass
        yield folder, len(runs)
