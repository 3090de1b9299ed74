"""The API reference in docs/ is generated from the op table and must match it."""

import importlib.util
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_api_reference_is_generated_from_the_op_table():
    spec = importlib.util.spec_from_file_location("generate", DOCS / "generate.py")
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    assert (DOCS / "api.md").read_text() == generate.render(), (
        "docs/api.md is out of date: run `python docs/generate.py`"
    )
