"""A newcomer's first hour as README.md gives it (issue 45), on the shared Ray instance: the default
`collbench run` twice into ./results, then `collbench report`, `collbench report --format html`
(opened in headless Chromium: every figure drawn, nothing fetched, the page within three screens;
its first screen is docs/img/report-cpu.png when COLLBENCH_SCREENSHOTS=docs/img) and `collbench
compare`, each with no folder named."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.screens import SCREEN, needs_chromium, open_page


def _collbench(args: list[str], cwd, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


@needs_chromium
def test_the_readmes_first_hour(ray_head, tmp_path):
    env = {**ray_head.env(), "PYTHONPATH": os.pathsep.join(sys.path)}
    runs = []
    for _ in range(2):
        proc = _collbench(["run"], tmp_path, env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append((proc.stdout + proc.stderr).rsplit("written to ", 1)[1].split()[0].rsplit("/", 1)[1])
    text = _collbench(["report"], tmp_path, env)
    # the default sweep on one node: 7 collectives x 11 sizes of 16 bytes to 16M, intra only
    assert text.returncode == 0 and f"run {runs[1]} (finished)" in text.stdout, text.stderr
    assert "(nothing in this run for: " in text.stdout and "\n(none)\n" in text.stdout  # the flags: none
    page = _collbench(["report", "--format", "html"], tmp_path, env)
    assert page.returncode == 0 and page.stdout.startswith("<!doctype html>"), page.stderr
    path = tmp_path / "report.html"
    path.write_text(page.stdout)
    shown = open_page(path, "report-cpu", tmp_path)
    assert not shown.errors and shown.requests == [path.as_uri()]
    busbw, latency = shown.figures
    assert busbw["caption"].startswith("busbw by message size, 7 collective(s)")
    assert latency["caption"].startswith("latency by message size, 7 collective(s)")
    # a panel per collective: 7 panels of 11 points (markers with their value on hover) each
    assert all(f["w"] > 900 and f["drawn"] > 7 * 11 for f in shown.figures), shown.figures
    assert "NVLink" not in shown.text and "Nothing flagged" in shown.text
    print(f"page height {shown.height} px")
    assert shown.height <= 3 * SCREEN["height"], shown.height
    cmp = _collbench(["compare", "--format", "json"], tmp_path, env)
    assert cmp.returncode == 0, cmp.stdout[-2000:] + cmp.stderr[-2000:]
    summary = json.loads(cmp.stdout)["tables"]["summary"][0]
    assert (summary["baseline_runs"], summary["new_run"]) == ([runs[0]], runs[1])


def test_the_readmes_python_runs_on_one_node(ray_head, tmp_path):
    """README's API snippet, as written, in a fresh interpreter joined to the shared Ray instance
    (its `ray.init(address="auto")`), then checked: one run of all_reduce up to 16M, its rows, its
    report with nothing flagged on one healthy node."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    (snippet,) = re.findall(r"```py\n(.*?)```", readme, flags=re.S)
    check = snippet + textwrap.dedent("""
        import json
        print(json.dumps({"collectives": sorted(set(df.collective)), "max": int(df.msg_bytes.max()),
                          "ok": bool((df.status == "ok").all()), "state": str(result.state.value),
                          "flags": len(rep.flags), "runs": os.listdir("results")}))
        """)
    env = {**ray_head.env(), "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", "import os\n" + check], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said["collectives"] == ["all_reduce"] and said["max"] == 16 << 20 and said["ok"], said
    assert said["state"] == "finished" and said["flags"] == 0 and len([r for r in said["runs"] if r != "_runs"]) == 1
