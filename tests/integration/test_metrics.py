"""Live metrics: a real Ray head with its metrics export port; while `collbench run` goes, its
Prometheus endpoint is scraped and the collbench series are found with the run's labels, and
their values are those of the rows the run wrote."""

from __future__ import annotations

import re
import time
import urllib.request

import pandas as pd
import pytest

from orchestrator.execution.metrics import MEASUREMENT_TAGS
from tests.faults import LiveRun

SERIES = re.compile(r'^(ray_collbench_\w+)\{(.*)\} (\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
FAST = {"RAY_metrics_report_interval_ms": "500"}  # Ray's default is 10 s


def scrape(port: int) -> list[tuple[str, dict, float]]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = []
    for line in text.splitlines():
        m = SERIES.match(line)
        if m:
            out.append((m.group(1), dict(LABEL.findall(m.group(2))), float(m.group(3))))
    return out


@pytest.fixture(scope="module")
def metrics_head():
    from orchestrator.lab.raynodes import wait_port
    from tests.raycluster import RayHead

    head = RayHead(env=FAST)
    if not wait_port("127.0.0.1", head.metrics_port, 60):  # the metrics agent starts after the GCS
        head.stop()
        pytest.fail(f"the head's metrics agent did not open port {head.metrics_port}")
    yield head
    head.stop()


def test_a_run_exports_its_metrics_to_prometheus(metrics_head, tmp_path):
    out = tmp_path / "results"
    run = LiveRun(["run", "--collectives", "all_reduce,all_gather", "-b", "64K", "-e", "4M", "-n", "40",
                   "--ranks-per-node", "2", "--patterns", "intra", "--group-sizes", "2", "--output", str(out)],
                  env={**metrics_head.env(), **FAST})
    latest: dict[tuple, tuple[dict, float]] = {}

    def scrape_into_latest():
        for name, labels, value in scrape(metrics_head.metrics_port):
            key = (name, *sorted((k, v) for k, v in labels.items() if k in (*MEASUREMENT_TAGS, "status")))
            latest[key] = (labels, value)

    try:
        while run.proc.poll() is None:
            scrape_into_latest()
            time.sleep(0.25)
        assert run.finish(timeout=60) == 0, "".join(run.stderr)[-2000:]
    finally:
        run.kill()
    for _ in range(8):  # the last values reach the agent within an export interval of the run's end
        scrape_into_latest()
        time.sleep(0.25)
    df = pd.read_parquet(out)
    run_id = df.run_id.iloc[0]
    seen = [(key[0], labels, value) for key, (labels, value) in latest.items() if labels.get("run_id") == run_id]
    names = {name for name, _, _ in seen}
    assert {"ray_collbench_busbw_gbps", "ray_collbench_time_us", "ray_collbench_groups_total",
            "ray_collbench_rows_total", "ray_collbench_round", "ray_collbench_groups_planned"} <= names, names
    # each measurement's gauges are exactly the busbw and time of its row (one group: one row per label set)
    busbw = [(labels, v) for name, labels, v in seen if name == "ray_collbench_busbw_gbps"]
    assert len(busbw) >= 4
    for labels, value in busbw:
        match = df[(df.collective == labels["collective"]) & (df.msg_bytes == int(labels["msg_bytes"]))
                   & (df.dtype == labels["dtype"]) & (df.op == labels["op"])
                   & (df.in_place.astype(str) == labels["in_place"])]
        assert len(match) == 1, labels
        row = match.iloc[0]
        assert labels["topology"] == row.topology == "intra" and labels["pattern"] == row.pattern == "intra"
        assert value == pytest.approx(row.busbw_gbps, rel=1e-6)
    counters = {(name, labels.get("status")): v for name, labels, v in seen
                if name in ("ray_collbench_rows_total", "ray_collbench_groups_total")}
    assert set(counters) == {("ray_collbench_rows_total", None), ("ray_collbench_groups_total", "ok")}, counters
    assert 1 <= counters[("ray_collbench_rows_total", None)] <= len(df)
    assert counters[("ray_collbench_groups_total", "ok")] == 1  # no failed or skipped series
    planned = [v for name, _, v in seen if name == "ray_collbench_groups_planned"]
    assert planned == [1.0]
