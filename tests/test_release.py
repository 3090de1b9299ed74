"""What a released library carries, consistent with itself: the licence the package
declares, one version everywhere (the package, its metadata, the changelog's newest
release, the citation), and a changelog in Keep a Changelog's form, which the site shows
as its release notes."""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path

import pytest
import tomllib

import xform

ROOT = Path(__file__).resolve().parents[1]
RELEASE = re.compile(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", re.M)
SECTIONS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")


def releases(text: str) -> list[tuple[tuple[int, ...], date, str]]:
    """(version, date, body) of each release of a changelog, in its order."""
    heads = list(RELEASE.finditer(text))
    ends = [h.start() for h in heads[1:]] + [len(text)]
    return [
        (tuple(map(int, h[1].split("."))), date.fromisoformat(h[2]), text[h.end() : end])
        for h, end in zip(heads, ends)
    ]


def test_the_licence_is_the_one_the_package_declares():
    metadata = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert metadata["license"] == {"text": "Apache-2.0"}
    licence = (ROOT / "LICENSE").read_text()
    assert licence.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in licence


def test_one_version_everywhere():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert xform.__version__ == version
    newest, released, _ = releases((ROOT / "CHANGELOG.md").read_text())[0]
    assert ".".join(map(str, newest)) == version
    citation = (ROOT / "CITATION.cff").read_text()
    assert re.search(rf"^version: {re.escape(version)}$", citation, re.M)
    assert re.search(rf"^date-released: {released.isoformat()}$", citation, re.M)
    assert re.search(r"^cff-version: 1\.2\.0$", citation, re.M)


def form_problems(text: str) -> list[str]:
    """What keeps a changelog from Keep a Changelog's form."""
    found = releases(text)
    if not found:
        return ["no release heading '## [x.y.z] - YYYY-MM-DD'"]
    problems = []
    versions = [v for v, _, _ in found]
    if versions != sorted(set(versions), reverse=True):
        problems.append(f"versions not newest first, once each: {versions}")
    if [d for _, d, _ in found] != sorted((d for _, d, _ in found), reverse=True):
        problems.append("dates not newest first")
    for version, _, body in found:
        sections = re.findall(r"^### (.+)$", body, re.M)
        known = [s for s in sections if s in SECTIONS]
        if not sections or known != sections or known != sorted(set(known), key=SECTIONS.index):
            problems.append(f"{version}: sections {sections}, of {SECTIONS} in that order")
        for section in re.split(r"^### .+$", body, flags=re.M)[1:]:
            if not re.search(r"^- ", section, re.M):
                problems.append(f"{version}: an empty section")
    return problems


def test_the_changelog_is_in_keep_a_changelog_form():
    assert form_problems((ROOT / "CHANGELOG.md").read_text()) == []


@pytest.mark.parametrize(
    "text",
    [
        "# Changelog\n",  # no release
        "## [0.1.0] - 2026-01-01\n### Added\n- a\n## [0.2.0] - 2026-02-01\n### Added\n- b\n",
        "## [0.1.0] - 2026-01-01\n### Improved\n- a\n",  # not a section of the form
        "## [0.1.0] - 2026-01-01\n### Fixed\n- a\n### Added\n- b\n",  # out of order
        "## [0.1.0] - 2026-01-01\n### Added\n### Fixed\n- b\n",  # an empty section
    ],
)
def test_a_changelog_out_of_form_is_found(text):
    assert form_problems(text)


def test_the_site_shows_the_changelog_as_release_notes():
    page = ROOT / "site" / "release_notes" / "index.html"
    if not page.is_file():
        pytest.skip("the site is not built (mkdocs build --strict, as .ci/run does first)")
    html = page.read_text()
    for version, _, _ in releases((ROOT / "CHANGELOG.md").read_text()):
        assert ".".join(map(str, version)) in html
