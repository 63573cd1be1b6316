"""HTML reports opened in a real headless browser (Debian's Chromium, driven by Playwright): what
loaded, what failed, the page's height, its figures, and a screenshot of its first screen. The
screenshots go to $COLLBENCH_SCREENSHOTS where set (docs/img: the pictures in docs/guides/report.md
are taken this way), else to the test's own folder."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SCREEN = {"width": 1200, "height": 900}
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium here (apt-get install chromium; .ci/run does)")


@dataclass
class Page:
    height: int  # px, the whole page at SCREEN's width
    errors: list[str]  # console errors and page errors
    requests: list[str]  # every URL the page asked for
    figures: list[dict]  # w, h, drawn (SVG elements), caption
    title: str
    text: str  # the page's visible text (folded tables' rows are not)
    png: Path  # the first screen


def open_page(page_path: Path, name: str, folder: Path) -> Page:
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra")
    out = Path(os.environ.get("COLLBENCH_SCREENSHOTS") or folder)
    out.mkdir(parents=True, exist_ok=True)
    png = out / f"{name}.png"
    errors, requests = [], []
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport=SCREEN)
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
            page.screenshot(path=str(png))
            return Page(height, errors, requests, figures, page.title(), page.inner_text("body"), png)
        finally:
            browser.close()
