"""No code line of the site is cut behind a scroll bar at 1280 px (docs/screenshots.py):
Chromium lays out the built pages and measures each code block. Skipped where no
Chromium is installed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from test_reference import site  # noqa: F401  (the built site, a fixture)

ROOT = Path(__file__).resolve().parent.parent


def _screenshots():
    name = "xform_docs_screenshots"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / "screenshots.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


screenshots = _screenshots()
needs_chromium = pytest.mark.skipif(
    screenshots.chromium() is None, reason="no Chromium to lay the pages out"
)


@needs_chromium
def test_no_code_line_is_cut_at_1280_px(site, tmp_path):  # noqa: F811
    cut = screenshots.check(site, tmp_path)
    assert not any(cut.values()), {page: blocks for page, blocks in cut.items() if blocks}
    assert set(screenshots.PAGES) <= cut.keys()
    assert len(list(tmp_path.glob("*.png"))) == len(screenshots.PAGES)


@needs_chromium
def test_a_cut_line_is_found(tmp_path):
    page = tmp_path / "page.html"
    long, short = "x = " + "1 + " * 60 + "1", "y = 2"
    page.write_text(
        "<html><body style='width: 400px'>"
        f"<pre><code style='overflow: auto; display: block'>{long}</code></pre>"
        f"<pre><code style='overflow: auto; display: block'>{short}</code></pre>"
        "</body></html>"
    )
    report = screenshots.measure(page, screenshots.chromium())
    assert report["width"] == screenshots.WIDTH
    assert [block["longest"] for block in screenshots.cut_blocks(report)] == [long]
