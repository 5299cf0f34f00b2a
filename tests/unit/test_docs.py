"""The README is a front door and the documents' links lead somewhere: every relative link
of README.md and docs/ names a file of the repository and, with ``#``, one of its headings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    anchors, fence = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and (m := re.match(r"^#{1,6} (.+)$", line)):
            anchors.add(_slug(m.group(1)))
    return anchors


def _links(path: Path) -> list[str]:
    text, fence, out = path.read_text(encoding="utf-8"), False, []
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence:
            out += LINK.findall(line)
    return out


def test_the_readme_is_at_most_200_lines() -> None:
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 200


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_every_relative_link_names_a_file_and_a_heading_that_exist(document: Path) -> None:
    broken = []
    for target in _links(document):
        if re.match(r"^(https?:|mailto:)", target):
            continue
        path_part, _, anchor = target.partition("#")
        path = (document.parent / path_part).resolve() if path_part else document
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{target}: no heading #{anchor} in {path.relative_to(ROOT)}")
    assert not broken, f"{document.relative_to(ROOT)}: " + "; ".join(broken)


SOURCE_PATH = re.compile(r"\b((?:solaris|bench|scripts|dags|tests)/[\w/]*\.py)\b")


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_every_source_file_a_document_names_exists(document: Path) -> None:
    """A module that became a package, or moved, leaves no document pointing at it."""
    text = document.read_text(encoding="utf-8")
    missing = sorted({p for p in SOURCE_PATH.findall(text) if not (ROOT / p).is_file()})
    assert not missing, f"{document.relative_to(ROOT)} names {missing}"
