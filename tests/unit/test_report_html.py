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


def test_size_plots_share_axes_and_show_spread_fit_and_values(tmp_path):
    """Issue 45: one figure per metric, a panel per collective sharing both axes; per topology the
    median line, the band from the fastest to the slowest iteration, the accepted fit (dashed), and
    every point's value as an SVG tooltip (the table's number, in plain decimals)."""
    from orchestrator.analysis import plots, tables
    from orchestrator.analysis.fits import fits
    from orchestrator.analysis.frame import COLUMNS, DICTIONARY, Frame
    from orchestrator.results import dataset

    out, run = str(tmp_path / "results"), "20261201T120000Z-bbbbbb"
    # exact alpha-beta rows (20 us + bytes at 40 / 10 GB/s), iterations spread by 10% noise
    for coll, suffix in (("all_reduce", ""), ("all_gather", "-ag")):
        write_cluster_run(out, run, nodes=2, ranks_per_node=2, patterns=("intra", "inter"), collective=coll,
                          file_suffix=suffix, noise=0.1)
    frame = Frame(dataset.load_table(out, run, columns=COLUMNS, dictionary=DICTIONARY))
    made = {name: (caption, fig) for name, caption, fig in plots.figures(frame, 1.0, "GBps")}
    assert list(made)[:2] == ["busbw.png", "latency.png"]  # then the node-pair heatmap, the rails
    caption, fig = made["busbw.png"]
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert sorted(ax.get_title() for ax in panels) == ["all_gather", "all_reduce"]
    assert panels[0].get_shared_y_axes().joined(panels[0], panels[1])
    assert panels[0].get_shared_x_axes().joined(panels[0], panels[1])
    df = frame.df
    accepted = [f for f in fits(df) if f["quality"] == "good"]
    assert len(accepted) == 4  # 2 collectives x 2 topologies
    for ax, coll in ((ax, ax.get_title()) for ax in panels):
        solid = [ln for ln in ax.get_lines() if ln.get_linestyle() == "-"]
        dashed = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
        assert sorted(ln.get_label() for ln in solid) == ["inter (2 ranks)", "intra (2 ranks)"]
        assert len(dashed) == 2 and len(ax.collections) == 2  # a fit and a band for each topology
        for line in dashed:
            topo = next(ln for ln in solid if ln.get_color() == line.get_color()).get_label().split()[0]
            fit = next(f for f in accepted if (f["collective"], f["topology"]) == (coll, topo))
            # busbw of the fit's time = alpha + bytes / bandwidth, times busbw's factor for 2 ranks:
            # all_reduce 2(n-1)/n = 1, all_gather (n-1)/n = 0.5 (nccl-tests' PERFORMANCE.md)
            x, factor = line.get_xdata(), {"all_reduce": 1.0, "all_gather": 0.5}[coll]
            assert list(line.get_ydata()) == pytest.approx(
                list(x / (fit["alpha_us"] + x / (fit["bandwidth"] * 1e3)) / 1e3 * factor))
        table = tables.by_size(df, coll, "busbw_gbps")
        for line in solid:
            topo = line.get_label().split()[0]
            assert list(line.get_ydata()) == pytest.approx([r[topo] for r in table])
            g = df[(df.collective == coll) & (df.topology == topo)]
            band = ax.collections[[ln.get_label() for ln in solid].index(line.get_label())]
            lo, hi = band.get_paths()[0].vertices[:, 1].min(), band.get_paths()[0].vertices[:, 1].max()
            # the band spans the busbw of the slowest to the fastest iteration
            assert lo == pytest.approx((g.busbw_gbps * g.time_us / g.time_us_max).groupby(g.msg_bytes).median().min())
            assert hi == pytest.approx((g.busbw_gbps * g.time_us / g.time_us_min).groupby(g.msg_bytes).median().max())
    svg = plots.svg(fig)
    top = tables.by_size(df, "all_gather", "busbw_gbps")[-1]
    assert f"<title>all_gather intra (2 ranks), {top['size']}: {tables.plain(top['intra'])} GBps</title>" in svg
    assert svg.count("<title>") == 2 * 2 * len(tables.by_size(df, "all_reduce", "busbw_gbps"))
    assert "e-0" not in "".join(re.findall(r"<title>([^<]*)</title>", svg))
