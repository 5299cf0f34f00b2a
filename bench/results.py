"""Where a benchmark's figures go: the commit they were measured at, and the block of a docs
page they fill (docs tables are generated from the benches' own output, never copied)."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["commit", "write_block"]

REPO = Path(__file__).resolve().parents[1]


def commit() -> str:
    """The short hash of the checkout's HEAD ("unknown" outside a git checkout)."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return "unknown"
    return done.stdout.strip() or "unknown"


def write_block(page: Path, table: str, block: str) -> None:
    """Replace what lies between ``page``'s two ``block`` markers (``<!-- block: begin -->``
    and ``<!-- block: end -->``) with ``table``; a page without them is an error."""
    begin, end = f"<!-- {block}: begin -->", f"<!-- {block}: end -->"
    text = page.read_text()
    if begin not in text or end not in text:
        raise SystemExit(f"{page} has no {begin} ... {end} block for the table")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    page.write_text(f"{head}{begin}\n{table}{end}{tail}")
