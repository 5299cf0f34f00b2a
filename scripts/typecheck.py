"""Type-check ``solaris/`` with mypy (strict) against a recorded baseline that only shrinks.

``make test`` runs ``python scripts/typecheck.py``: mypy's errors are counted per file and
compared with ``typecheck-baseline.txt`` (one ``<count> <file>`` line per file that has
errors). A file with more errors than its line, or a file that has none recorded, fails the
run and prints its new errors; a file with fewer is reported so that ``--update`` can lower
the line. ``python scripts/typecheck.py --update`` rewrites the baseline from the current
errors and refuses to raise any count.
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
ERROR = re.compile(r"^(?P<file>[^:\s]+\.py):\d+: error: ")


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
    return Counter(ERROR.match(line)["file"] for line in lines), lines  # type: ignore[index]


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
        f"# total {sum(counts.values())}\n" + body,
        encoding="utf-8",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--update", action="store_true", help="lower the baseline to today's")
    args = parser.parse_args(argv)
    counts, lines = run_mypy()
    baseline = read_baseline()
    grown = {f: n for f, n in counts.items() if n > baseline.get(f, 0)}
    shrunk = {f: n for f, n in baseline.items() if counts.get(f, 0) < n}
    if args.update:
        if grown and baseline:
            print("refusing to raise the baseline for:", ", ".join(sorted(grown)))
            return 1
        write_baseline(counts)
        print(f"baseline: {sum(counts.values())} errors in {len(counts)} files")
        return 0
    if grown:
        for file, n in sorted(grown.items()):
            print(f"{file}: {n} mypy errors, baseline {baseline.get(file, 0)}")
            for line in lines:
                if line.startswith(file + ":"):
                    print("   ", line)
        print("fix them (the baseline only shrinks)")
        return 1
    total, was = sum(counts.values()), sum(baseline.values())
    note = f"; {was - total} fewer than the baseline: run it with --update" if shrunk else ""
    print(f"mypy --strict on solaris/: {total} errors, none new{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
