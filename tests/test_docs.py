"""The documentation is checked like code.

- Every ```python block of the README and of the pages in docs/ runs, in order, each
  page in a namespace of its own (as a reader pasting the blocks into one session).
  A block followed by an ```text title="Output" block must print exactly that. Code that
  is not meant to run says so in its fence: ```bash, ```text, or ```{.python .no-run}.
  (The tutorials in docs/tutorials/ are scripts that the site's build runs.)
- docs/api.md is generated from the op table (`python docs/generate.py`).
- (tests/test_reference.py checks that the built site has an entry for every public name.)
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
# Pages with code to run: the README and the hand-written pages (not the generated ones:
# docs/tutorials/*.md come from scripts the build runs, docs/generated/ from the benchmarks).
PAGES = [README, *sorted(DOCS.glob("*.md"))]
FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
OUTPUT = 'text title="Output"'
README_LIMIT = 6 * 1024  # bytes: the README is a quick start; the site has the rest


@dataclass
class Block:
    code: str
    line: int  # of the block's first code line in its page, 1-based
    expected: str | None  # what it must print, or None: unchecked


def code_blocks(page: Path) -> list[Block]:
    """The blocks of `page` that run, each with the output that must follow it."""
    text = page.read_text()
    fences = list(FENCE.finditer(text))
    blocks = []
    for k, fence in enumerate(fences):
        info = fence["info"].strip()
        if info.startswith("{") and ".no-run" in info:
            continue
        language = info.split()[0] if info else ""
        if language in ("py", "python3", "pycon") or (
            language.startswith("python") and info != "python"
        ):
            raise AssertionError(
                f"{page.name}:{text.count(chr(10), 0, fence.start()) + 1}: fence ```{info}: "
                "write ```python (it runs) or ```{.python .no-run} (it does not)"
            )
        if language != "python":
            continue
        expected = None
        following = fences[k + 1] if k + 1 < len(fences) else None
        if (
            following is not None
            and following["info"].strip() == OUTPUT
            and not text[fence.end() : following.start()].strip()
        ):
            expected = following["body"]
        line = text.count("\n", 0, fence.start("body")) + 1
        blocks.append(Block(fence["body"], line, expected))
    return blocks


@contextlib.contextmanager
def isolated_state():
    """A page starts as a reader's fresh session would (JAX in float32, torch's default
    dtype float32), and what it changes globally is put back afterwards (other tests set
    `jax_enable_x64`). Warp's log of each module it loads stays out of the output."""
    import numpy as np
    import warp as wp

    printing = np.get_printoptions()
    log_level = wp.config.log_level
    wp.config.log_level = wp.LOG_WARNING
    jax = sys.modules.get("jax")
    x64 = jax.config.jax_enable_x64 if jax else False
    if jax:
        jax.config.update("jax_enable_x64", False)
    torch = sys.modules.get("torch")
    dtype = torch.get_default_dtype() if torch else None
    if torch:
        torch.set_default_dtype(torch.float32)
    try:
        yield
    finally:
        np.set_printoptions(**printing)
        wp.config.log_level = log_level
        if "jax" in sys.modules:
            sys.modules["jax"].config.update("jax_enable_x64", x64)
        if "torch" in sys.modules and dtype is not None:
            sys.modules["torch"].set_default_dtype(dtype)


def normalised(output: str) -> str:
    return "\n".join(line.rstrip() for line in output.strip("\n").splitlines())


def run_page(page: Path) -> list[tuple[Block, str]]:
    """Run a page's blocks in order in one namespace; returns what each printed."""
    namespace = {"__name__": "__docs__"}
    printed = []
    with isolated_state():
        for block in code_blocks(page):
            output = io.StringIO()
            # Padded so that a traceback names the page's own line numbers.
            code = compile("\n" * (block.line - 1) + block.code, str(page), "exec")
            with contextlib.redirect_stdout(output):
                exec(code, namespace)
            printed.append((block, output.getvalue()))
    return printed


@pytest.mark.parametrize(
    "page", [p for p in PAGES if code_blocks(p)], ids=lambda p: str(p.relative_to(ROOT))
)
def test_code_blocks_run_and_print_what_the_page_shows(page):
    for block, output in run_page(page):
        if block.expected is not None:
            assert normalised(output) == normalised(block.expected), (
                f"{page.name}, the block at line {block.line} printed:\n{output}\n"
                f"but the page shows:\n{block.expected}"
            )


def test_fences_that_do_not_run_say_so(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```py\nx = 1\n```\n")
    with pytest.raises(AssertionError, match="write ```python"):
        code_blocks(page)
    page.write_text(
        '```python\nprint(1)\n```\n\n```text title="Output"\n1\n```\n'
        "```{.python .no-run}\nraise SystemExit\n```\n```bash\nexit 1\n```\n"
    )
    (block,) = code_blocks(page)
    assert (block.code, block.line, block.expected) == ("print(1)\n", 2, "1\n")
    assert [output for _, output in run_page(page)] == ["1\n"]


def test_the_readme_is_a_quick_start():
    size = len(README.read_bytes())
    assert size <= README_LIMIT, (
        f"README.md is {size} bytes; keep it a quick start (at most {README_LIMIT}) and "
        "move the rest to a page of docs/"
    )


# --- the op reference -----------------------------------------------------------------------


def load_generator():
    spec = importlib.util.spec_from_file_location("generate", DOCS / "generate.py")
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    return generate


def test_api_reference_is_generated_from_the_op_table():
    assert (DOCS / "api.md").read_text() == load_generator().render(), (
        "docs/api.md is out of date: run `python docs/generate.py`"
    )


# --- measured figures -----------------------------------------------------------------------

RESULTS = ROOT / "benchmarks"
NUMBER = r"\d(?:[\d,]*\d)?(?:\.\d+)?"  # a comma inside, not after (`w >= 0, s`)
# A time (ns to s) or a ratio (`0.58x`; not a dimension such as `7 x 7`), alone or as a
# range (`0.15-0.88x`, `1 to 4 s`), in a page's prose.
QUOTED = re.compile(
    rf"(?<![\w.\-/])(?P<low>{NUMBER})(?:\s*(?:-|–|to)\s*(?P<high>{NUMBER}))?"
    r"\s?(?P<unit>ns|µs|us|ms|s|x(?!\s*[\d(]))(?![\w/^])"
)
SCALE = {"ns": 1e9, "µs": 1e6, "us": 1e6, "ms": 1e3, "s": 1.0, "x": 1.0}


def measured_values(sources) -> list[float]:
    """Every number of the results files `sources` (names in benchmarks/)."""
    found: list[float] = []

    def walk(value):
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            found.append(float(value))

    for source in sorted(sources):
        walk(json.loads((RESULTS / source).read_text()))
    return found


def held(quoted: str, unit: str, values: list[float]) -> bool:
    """Whether a results file holds `quoted` (as printed, in `unit`): a value in seconds
    that rounds to it in that unit, or one stored in that unit (`ns per configuration`,
    `step µs`) or a ratio that rounds to it."""
    number = float(quoted.replace(",", ""))
    decimals = len(quoted.split(".")[1]) if "." in quoted else 0
    half = 0.5 * 10.0**-decimals * (1 + 1e-9)
    return any(
        abs(value * scale - number) <= half for value in values for scale in {SCALE[unit], 1.0}
    )


def quoted_figures(text: str) -> list[tuple[int, str, str, str]]:
    """(line, the figure as written, its number, its unit) of each time or ratio in the
    prose of a page: not in code blocks (programs and their output) and not the
    `<!-- measured: NAME -->` lines, which the build replaces with figures it draws."""
    prose = FENCE.sub(lambda m: "\n" * m.group().count("\n"), text)
    figures = []
    for match in QUOTED.finditer(prose):
        line = prose.count("\n", 0, match.start()) + 1
        for number in (match["low"], match["high"]):
            if number:
                figures.append((line, match.group(), number, match["unit"]))
    return figures


# The tutorials' pages are made from these scripts: their docstrings and comments are
# the pages' prose.
TUTORIALS = sorted((DOCS / "tutorials").glob("[!_]*.py"))
TUTORIALS.remove(DOCS / "tutorials" / "run.py")


def prose_of(page: Path) -> str:
    """A page's text; of a tutorial script, its docstring and comment lines (the code
    blanked, so that line numbers stay the script's)."""
    text = page.read_text()
    if page.suffix != ".py":
        return text
    import ast

    module = ast.parse(text)
    docstring_end = module.body[0].end_lineno if ast.get_docstring(module) else 0
    return "\n".join(
        line if number <= docstring_end or line.lstrip().startswith("#") else ""
        for number, line in enumerate(text.splitlines(), 1)
    )


def test_pages_quote_no_figure_that_no_results_file_holds():
    """Measured numbers come from benchmarks/results*.json, drawn into the pages when the
    site is built (`<!-- measured: NAME -->`, docs/figures.py); a time or ratio typed into
    a page goes stale with the next run, so each one must be a number a results file
    holds, as printed."""
    figures = _load_figures()
    unheld = []
    for page in PAGES + TUTORIALS:
        text = prose_of(page)
        # The page's results files: those its figures are drawn from and those it names.
        sources = figures.used_sources(text) | set(re.findall(r"results\w*\.json", text))
        values = measured_values(s for s in sources if (RESULTS / s).is_file())
        unheld += [
            f"{page.relative_to(ROOT)}:{line}: {written}"
            for line, written, number, unit in quoted_figures(text)
            if not held(number, unit, values)
        ]
    assert not unheld, (
        f"{len(unheld)} figures quoted by hand that no results file holds (draw them from "
        "the results with `<!-- measured: NAME -->`, docs/figures.py):\n" + "\n".join(unheld)
    )


def test_a_figure_no_results_file_holds_is_found():
    values = [0.000123456, 0.58, 15523.499]
    text = (
        "It takes 123 µs (0.58x the peer's), 15,523 ns a configuration.\n"
        "```python\nprint('9.9 s')\n```\n<!-- measured: op_ratios -->\n"
        "A 7 x 7 system, 4x^2, 2.5x faster, 8 to 9 s.\n"
    )
    figures = quoted_figures(text)
    assert [(line, number, unit) for line, _, number, unit in figures] == [
        (1, "123", "µs"),
        (1, "0.58", "x"),
        (1, "15,523", "ns"),
        (6, "2.5", "x"),
        (6, "8", "s"),
        (6, "9", "s"),
    ]
    assert [held(n, u, values) for _, _, n, u in figures] == [True] * 3 + [False] * 3
    assert not held("124", "µs", values) and not held("0.6", "x", [0.66])
    assert held("0.6", "x", [0.64])


def test_no_page_speaks_of_issues_or_the_spec():
    """The pages are for users: the project's issues and its SPEC are not theirs to read."""
    mentions = [
        f"{page.relative_to(ROOT)}:{number}: {line.strip()}"
        for page in PAGES + TUTORIALS + [DOCS / "api.md"]
        for number, line in enumerate(prose_of(page).splitlines(), 1)
        if re.search(r"\bissues?\b|\bSPEC\b|\bthis wave\b", line, re.I)
    ]
    assert not mentions, "\n".join(mentions)


def test_every_measured_directive_names_a_figure():
    figures = _load_figures()
    for page in PAGES:
        for match in figures.DIRECTIVE.finditer(page.read_text()):
            assert match["name"] in figures.REGISTRY, (page.name, match["name"])
    with pytest.raises(ValueError, match="no measured item 'nonesuch'"):
        figures.expand("<!-- measured: nonesuch -->\n", "page.md")


def _load_figures():
    name = "xform_docs_figures"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, DOCS / "figures.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def test_docs_code_is_formatted_at_the_page_width():
    """The pages' Python blocks and the tutorial scripts at 88 columns (docs/ruff.toml):
    wider lines are cut behind a scroll bar at 1280 px (docs/screenshots.py)."""
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed")
    checked = subprocess.run(
        [ruff, "format", "--check", "docs"], cwd=ROOT, capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
