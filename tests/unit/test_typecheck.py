"""The type check's baseline: totals per file, and bug-shaped errors per file and code."""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "typecheck.py"


def _typecheck():
    spec = importlib.util.spec_from_file_location("typecheck_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_new_bug_shaped_error_fails_even_where_the_files_total_fell() -> None:
    typecheck = _typecheck()
    line = 'solaris/x.py:3: error: Too many arguments for "SchemaError"  [call-arg]'
    match = typecheck.ERROR.match(line)
    assert match is not None and (match["file"], match["code"]) == ("solaris/x.py", "call-arg")
    baseline = Counter({"solaris/x.py": 5})
    counts = Counter({"solaris/x.py": 4, "solaris/x.py [call-arg]": 1})
    assert typecheck.grown_counts(counts, baseline) == {"solaris/x.py [call-arg]": 1}
    assert typecheck.grown_counts(counts, counts) == {}
    assert typecheck._total(counts) == 4  # a per-code line counts no error twice
