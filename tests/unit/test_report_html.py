"""`collbench report --format html`: one self-contained page, checked in a real headless browser
(Chromium through Playwright): it loads with no console error and no request beyond the file
itself, every figure is drawn (an SVG with a size and drawn elements), the flags with their
reasons come first, and a screenshot is taken. .ci/run installs Chromium (Debian's package);
without it the test skips with that reason."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from tests.helpers import run_main
from tests.synthetic import write_cluster_run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def page_file(tmp_path_factory):
    out = tmp_path_factory.mktemp("html")
    results = str(out / "results")
    # 6 nodes of 2 ranks: intra groups, inter, every node pair and every GPU pair; one slow pair
    write_cluster_run(results, "20261201T120000Z-aaaaaa", nodes=6, ranks_per_node=2,
                      patterns=("intra", "inter", "pairwise", "intra-pairwise"), faults=(("pair", 2, 5, 0.6),))
    proc = run_main(["report", results, "--format", "html"])
    assert proc.returncode == 1, proc.stderr  # the slow pair is flagged
    page = out / "report.html"
    page.write_text(proc.stdout)
    flags = json.loads(run_main(["report", results, "--format", "json"]).stdout)["flags"]
    return page, flags


def test_the_page_is_self_contained(page_file):
    page, flags = page_file
    text = page.read_text()
    assert text.startswith("<!doctype html>") and text.rstrip().endswith("</html>")
    bare = re.sub(r'xmlns(:\w+)?="[^"]*"', "", text)  # namespace names are never fetched
    for outside in ("<script", "http://", "https://", "<link", "@import", "<metadata"):
        assert outside not in bare, outside
    assert not re.search(r"url\((?!#)", bare)  # only the SVGs' own clip paths (url(#id))
    order = [text.index(h) for h in ("<h2>Verdicts and flags</h2>", "<h2>Plots</h2>", "<h2>busbw (GBps) by message",
                                     "<h2>The run</h2>")]
    assert order == sorted(order)  # verdicts first, the run's header last
    # a section with nothing to show is left out, and one line names them (issue 45: 8 of 12 said "(none)");
    # no NVLink where no transport said NVLink, no number in exponent form
    assert "(none)" not in text and "NVLink" not in text
    left_out = re.search(r"Nothing in this run for: ([a-z_, ]+) \(sections left out\)", text)
    assert left_out and {"expected", "replay_steps", "replay_groups", "all_to_allv"} <= set(left_out.group(1).split(", "))
    assert not re.search(r"<td[^>]*>-?\d+(\.\d+)?e[-+]\d+</td>", text)
    assert all(f["message"].split(":")[0] in text for f in flags)


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium here (apt-get install chromium; .ci/run does)")
def test_a_headless_browser_renders_every_figure_without_an_error(page_file, tmp_path):
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra")
    page_path, flags = page_file
    errors, requests = [], []
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(page_path.as_uri(), wait_until="load")
            figures = page.eval_on_selector_all(
                "figure", "fs => fs.map(f => { const s = f.querySelector('svg'); const r = s ? "
                "s.getBoundingClientRect() : {width: 0, height: 0}; return {w: r.width, h: r.height, "
                "drawn: s ? s.querySelectorAll('path, use, image, rect').length : 0, "
                "caption: f.querySelector('figcaption').textContent}; })")
            height = page.evaluate("document.documentElement.scrollHeight")
            shot = tmp_path / "report.png"
            page.screenshot(path=str(shot), full_page=True)
            title = page.title()
            first_flag = page.inner_text("table tr:nth-child(2)")
        finally:
            browser.close()
    assert not errors, errors
    assert requests == [page_path.as_uri()]  # nothing fetched beside the page
    captions = [f["caption"] for f in figures]
    assert len(figures) == 5, captions  # busbw and latency, the node-pair heatmap, GPU pairs, rails
    assert all(f["w"] > 300 and f["h"] > 150 and f["drawn"] > 10 for f in figures), figures
    assert any("every node pair" in c for c in captions) and any("GPU pair" in c for c in captions)
    assert shot.stat().st_size > 50_000  # a page with five plots, not a blank one
    # plots two abreast and empty sections left out: about four screens of 900 px for five plots and
    # six tables (issue 45: 12,100 px, plots one a row); printed for docs/PERFORMANCE.md
    print(f"page height {height} px")
    assert height < 4.5 * 900, height
    assert title.startswith("collbench report 20261201T120000Z-aaaaaa")
    assert flags[0]["kind"] in first_flag
