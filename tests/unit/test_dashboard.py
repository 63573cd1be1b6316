"""The Grafana dashboard shipped in docs/grafana queries exactly the series collbench exports (the
export itself, scraped from a real Ray head while a run goes: tests/integration/test_metrics.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from orchestrator.execution.metrics import NAMES
from orchestrator.execution.metrics import WATCH_NAMES as WATCH_METRICS

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "collbench.json"


def test_the_grafana_dashboard_shows_the_series_the_run_exports():
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    used = set(re.findall(r"ray_collbench_\w+", " ".join(exprs)))
    exported = {f"ray_{n}" for n in NAMES if n not in ("collbench_groups", "collbench_rows")}
    exported |= {"ray_collbench_groups_total", "ray_collbench_rows_total"}
    exported |= {f"ray_{n}" + ("_total" if n == "collbench_alerts" else "") for n in WATCH_METRICS}  # watch's
    assert used == exported  # every panel queries a real series, and every series has a panel
    assert any(v["name"] == "run_id" for v in board["templating"]["list"])
