"""MkDocs hooks (mkdocs.yml `hooks:`): what the site needs that is not a committed page.

Before each build:
- the tutorials run (`docs/tutorials/run.py`) where their pages are missing or older than
  their scripts: each page holds the script's code, its output and its figures;
- the performance figures are drawn from the benchmark results (`docs/figures.py`) into
  docs/generated/, with the plot the benchmark itself wrote (`benchmarks/results.png`).

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
        return "Unsupported item in xform.__all__: _FUNCTIONS" not in record.getMessage()


def on_startup(command, dirty, **kwargs):
    for name in ("griffe", "mkdocs.plugins.griffe"):
        logging.getLogger(name).addFilter(_GeneratedAll())


def on_pre_build(config, **kwargs):
    _load(DOCS / "tutorials" / "run.py").run_stale()
    _load(DOCS / "figures.py").draw_stale()
