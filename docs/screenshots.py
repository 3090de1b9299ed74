"""Screenshots of the built site in headless Chromium at 1280 px, and a check that no code
line is cut behind a scroll bar: `python docs/screenshots.py [SITE] [--out DIR]`.

For every page of the built site (`mkdocs build` first), Chromium loads a copy of it
with a script that measures every code block as the browser lays it out at 1280 px: a
block whose content is wider than its box (`scrollWidth > clientWidth`) has lines cut
behind a scroll bar. It writes a screenshot (the top 4000 px) of each page of `PAGES`
(the home, groups, pose-graph and kinematics pages, and the walkthroughs) into `--out`
(default `site/screenshots/`) and prints, for each cut block, its longest line; it exits
1 if any block is cut. tests/test_screenshots.py runs it on the site where Chromium is
installed.

Chromium is the system's (`chromium`, `chromium-browser`, `google-chrome`; or
`$CHROMIUM`), driven by its command line (`--dump-dom`, `--screenshot`): no Python
package beyond the standard library.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WIDTH = 1280
PAGES = (
    "index.html",
    "groups/index.html",
    "tutorials/pose_graph/index.html",
    "pose_graph/index.html",
    "kinematics/index.html",
    "tutorials/inverse_kinematics/index.html",
    "tutorials/bundle_adjustment/index.html",
)
REPORT_ID = "xform-code-widths"
# Measures each code block once the page is laid out, and leaves the result in the DOM
# for `--dump-dom` to print.
MEASURE = f"""
<script>
window.addEventListener("load", async () => {{
  await document.fonts.ready;  // measured in the fonts the reader sees
  const blocks = [...document.querySelectorAll("pre > code")].map((code) => {{
    const lines = code.textContent.split("\\n");
    return {{
      scroll: code.scrollWidth,
      client: code.clientWidth,
      longest: lines.reduce((a, b) => (b.length > a.length ? b : a), ""),
    }};
  }});
  const report = document.createElement("pre");
  report.id = "{REPORT_ID}";
  report.textContent = JSON.stringify({{width: window.innerWidth, blocks}});
  document.body.appendChild(report);
}});
</script>
"""
FOUND = re.compile(rf'<pre id="{REPORT_ID}">(.*?)</pre>', re.S)


def chromium() -> str | None:
    """The Chromium binary, or None."""
    names = [
        os.environ.get("CHROMIUM", ""),
        "chromium",
        "chromium-browser",
        "google-chrome",
    ]
    return next((shutil.which(n) for n in names if n and shutil.which(n)), None)


def _run(browser: str, *arguments: str) -> str:
    command = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--window-size={WIDTH},1000",
        "--virtual-time-budget=10000",
        *arguments,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def measure(page: Path, browser: str) -> dict:
    """The code blocks of the HTML file `page` as Chromium lays them out at WIDTH px:
    {"width": ..., "blocks": [{"scroll", "client", "longest"}, ...]}."""
    html = page.read_text()
    # A copy beside the page, so that its stylesheets and scripts load as the page's do.
    with tempfile.NamedTemporaryFile(
        "w", suffix=".html", dir=page.parent, prefix=".measure-", delete=False
    ) as copy:
        copy.write(html.replace("</body>", MEASURE + "</body>"))
    try:
        dom = _run(browser, "--dump-dom", Path(copy.name).resolve().as_uri())
    finally:
        Path(copy.name).unlink()
    found = FOUND.search(dom)
    if found is None:
        raise RuntimeError(f"{page}: the measuring script left no report")
    import html as html_module

    return json.loads(html_module.unescape(found.group(1)))


def cut_blocks(report: dict) -> list[dict]:
    return [b for b in report["blocks"] if b["scroll"] > b["client"] + 1]


def screenshot(page: Path, browser: str, out: Path, height: int = 4000) -> None:
    _run(
        browser,
        f"--window-size={WIDTH},{height}",
        f"--screenshot={out}",
        page.as_uri(),
    )


def site_pages(site: Path) -> list[str]:
    """Every page of the site, relative to it."""
    return sorted(str(p.relative_to(site)) for p in site.rglob("index.html"))


def check(site: Path, out: Path | None, pages=None) -> dict[str, list[dict]]:
    """Each page (default: every page of the site) -> its cut code blocks; screenshots of
    those of PAGES into `out` unless it is None."""
    pages = site_pages(site) if pages is None else pages
    browser = chromium()
    if browser is None:
        raise RuntimeError("no Chromium found (set $CHROMIUM)")
    cut = {}
    for name in pages:
        page = (site / name).resolve()
        if not page.is_file():
            raise FileNotFoundError(f"{page}: build the site first (mkdocs build)")
        report = measure(page, browser)
        if report["width"] != WIDTH:
            raise RuntimeError(f"{name}: laid out at {report['width']} px, not {WIDTH}")
        cut[name] = cut_blocks(report)
        if out is not None and name in PAGES:
            out.mkdir(parents=True, exist_ok=True)
            screenshot(page, browser, out / (name.replace("/", "_") + ".png"))
        print(f"{name}: {len(report['blocks'])} code blocks, {len(cut[name])} cut")
        for block in cut[name]:
            print(
                f"    {block['scroll']} px in {block['client']}: {block['longest']!r}"
            )
    return cut


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", nargs="?", type=Path, default=ROOT / "site")
    parser.add_argument(
        "--out", type=Path, help="screenshots here (default SITE/screenshots)"
    )
    args = parser.parse_args(argv)
    cut = check(args.site, args.out or args.site / "screenshots")
    return 1 if any(cut.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
