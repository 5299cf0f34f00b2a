"""Type-check ``solaris/`` with mypy (strict) against a recorded baseline that only shrinks.

``make test`` runs ``python scripts/typecheck.py``: mypy's errors are counted per file and
compared with ``typecheck-baseline.txt`` (one ``<count> <file>`` line per file that has
errors). A file with more errors than its line, or a file that has none recorded, fails the
run and prints its new errors; a file with fewer is reported so that ``--update`` can lower
the line. ``python scripts/typecheck.py --update`` rewrites the baseline from the current
errors and refuses to raise any count.

Bug-shaped errors (:data:`BUG_CODES`: a call with the wrong arguments, an attribute or
name that does not exist, a value that may be None) are counted per file *and code* as well
(``<count> <file> [<code>]`` lines): one more of them fails the run even where the file's
total fell, so a fixed annotation elsewhere in a file cannot absorb a new bug.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "typecheck-baseline.txt"
ERROR = re.compile(r"^(?P<file>[^:\s]+\.py):\d+: error: .*?(?:\[(?P<code>[a-z-]+)\])?$")
BUG_CODES = ("call-arg", "arg-type", "attr-defined", "name-defined", "union-attr")


def run_mypy() -> tuple[Counter[str], list[str]]:
    """mypy's errors on ``solaris/`` (settings in pyproject.toml): per-file counts, lines."""
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "solaris"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if done.returncode not in (0, 1):  # 2: mypy itself failed (bad config, crash)
        sys.exit(f"mypy failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
    lines = [line for line in done.stdout.splitlines() if ERROR.match(line)]
    counts: Counter[str] = Counter()
    for line in lines:
        match = ERROR.match(line)
        assert match is not None
        counts[match["file"]] += 1
        if match["code"] in BUG_CODES:
            counts[f"{match['file']} [{match['code']}]"] += 1
    return counts, lines


def read_baseline() -> Counter[str]:
    counts: Counter[str] = Counter()
    if BASELINE.is_file():
        for line in BASELINE.read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.startswith("#"):
                count, file = line.split(maxsplit=1)
                counts[file] = int(count)
    return counts


def write_baseline(counts: Counter[str]) -> None:
    body = "".join(f"{n} {file}\n" for file, n in sorted(counts.items()) if n)
    BASELINE.write_text(
        "# mypy --strict errors per file in solaris/ (scripts/typecheck.py): may only shrink\n"
        "# <count> <file> [<code>]: the file's bug-shaped errors of that code, counted apart\n"
        f"# total {_total(counts)}\n" + body,
        encoding="utf-8",
    )


def grown_counts(counts: Counter[str], baseline: Counter[str]) -> dict[str, int]:
    """The files, and the files' bug-shaped codes, with more errors than their baseline."""
    return {key: n for key, n in counts.items() if n > baseline.get(key, 0)}


def _total(counts: Counter[str]) -> int:
    """Errors in all (the per-code lines count errors the per-file lines already count)."""
    return sum(n for key, n in counts.items() if " [" not in key)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--update", action="store_true", help="lower the baseline to today's")
    args = parser.parse_args(argv)
    counts, lines = run_mypy()
    baseline = read_baseline()
    grown = grown_counts(counts, baseline)
    shrunk = {f: n for f, n in baseline.items() if counts.get(f, 0) < n}
    if args.update:
        if not any(" [" in key for key in baseline):  # a baseline from before the codes
            grown = {key: n for key, n in grown.items() if " [" not in key}
        if grown and baseline:
            print("refusing to raise the baseline for:", ", ".join(sorted(grown)))
            return 1
        write_baseline(counts)
        files = sum(" [" not in key for key in counts)
        print(f"baseline: {_total(counts)} errors in {files} files")
        return 0
    if grown:
        for key, n in sorted(grown.items()):
            file, _, code = key.partition(" [")
            kind = f"[{code} errors (bug-shaped)" if code else "mypy errors"
            print(f"{file}: {n} {kind}, baseline {baseline.get(key, 0)}")
            for line in lines:
                if line.startswith(file + ":") and (not code or line.endswith(f"[{code}")):
                    print("   ", line)
        print("fix them (the baseline only shrinks)")
        return 1
    total, was = _total(counts), _total(baseline)
    note = f"; {was - total} fewer than the baseline: run it with --update" if shrunk else ""
    print(f"mypy --strict on solaris/: {total} errors, none new{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
