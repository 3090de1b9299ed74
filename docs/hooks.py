"""MkDocs hooks (mkdocs.yml `hooks:`): what the site needs that is not a committed page.

Before each build:
- the tutorials run (`docs/tutorials/run.py`) where their pages are missing or older than
  their scripts: each page holds the script's code, its output and its figures;
- the figures and tables of measured numbers are drawn from the benchmark results
  (`docs/figures.py`) into docs/generated/; each page's `<!-- measured: NAME -->` lines
  become them as the page is read.
After it, the site records what it was built from (`site_is_current`).

All of it is git-ignored, so a fresh clone builds it once and the site always shows what
the code does today.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"xform_docs_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class _GeneratedAll(logging.Filter):
    """`xform.__all__` lists the op functions generated from the op table (`*_FUNCTIONS`),
    which static analysis cannot read; the op reference (api.md) documents those names,
    and tests/test_docs.py checks that every name of `__all__` has an entry."""

    def filter(self, record: logging.LogRecord) -> bool:
        return (
            "Unsupported item in xform.__all__: _FUNCTIONS" not in record.getMessage()
        )


def on_startup(command, dirty, **kwargs):
    for name in ("griffe", "mkdocs.plugins.griffe"):
        logging.getLogger(name).addFilter(_GeneratedAll())


def on_pre_build(config, **kwargs):
    _load(DOCS / "tutorials" / "run.py").run_stale()
    _load(DOCS / "figures.py").draw_stale()


def on_page_markdown(markdown: str, page, **kwargs) -> str:
    """Each `<!-- measured: NAME -->` line becomes its figure or table (docs/figures.py),
    and a `<!-- changelog -->` line the changelog's releases (CHANGELOG.md, its title
    left out): the release notes are written once, where a release is made."""
    figures = sys.modules.get("xform_docs_figures") or _load(DOCS / "figures.py")
    markdown = figures.expand(markdown, page.file.src_uri)
    if CHANGELOG_MARK in markdown:
        releases = (ROOT / "CHANGELOG.md").read_text().split("\n", 1)[1]
        markdown = markdown.replace(CHANGELOG_MARK, releases.strip())
    return markdown


CHANGELOG_MARK = "<!-- changelog -->"


# --- what a site was built from --------------------------------------------------------------

ROOT = DOCS.parent
# What the site shows: the pages and their scripts, the code its reference and tutorials
# read, the examples they import, the data and the benchmark results they draw.
SOURCES = (
    "mkdocs.yml",
    "CHANGELOG.md",
    "docs",
    "xform",
    "interop_examples",
    "data",
    "benchmarks",
)
BUILT_FROM = (
    ".built-from"  # in the site folder: the digest of SOURCES it was built from
)


def _source_files() -> list[Path]:
    """The tracked and untracked-but-not-ignored files under SOURCES (git's view, so that
    the generated pages, caches and virtual environments do not count)."""
    import subprocess

    listed = subprocess.run(
        [
            "git",
            "ls-files",
            "--cached",
            "--others",
            "--exclude-standard",
            "-z",
            *SOURCES,
        ],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return sorted(ROOT / name for name in listed.split("\0") if name)


def sources_digest() -> str:
    import hashlib

    digest = hashlib.sha256()
    for path in _source_files():
        if path.is_file():
            digest.update(
                str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes()
            )
    return digest.hexdigest()


def site_is_current(site: Path) -> bool:
    """Whether `site` was built from the sources as they are now (tests/test_reference.py
    reads the site CI built rather than building it again)."""
    stamp = site / BUILT_FROM
    return stamp.is_file() and stamp.read_text() == sources_digest()


def on_post_build(config, **kwargs):
    (Path(config["site_dir"]) / BUILT_FROM).write_text(sources_digest())
