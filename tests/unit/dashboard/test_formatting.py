"""How the SOLARIS page writes a figure: by what its key says it is, never raising."""

from __future__ import annotations

from typing import Any

import pytest

from solaris.dashboard import formatting

T0 = 10_185 * 86_400  # 1997-11-20T00:00:00Z


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("freshness_s", 10_471.6 * 86_400, "10,471.6 d"),
        ("seconds", 4.25, "4.2 s"),
        ("fetch_p99_ms", 250.4, "250 ms"),
        ("computed_at", T0, "1997-11-20 00:00"),
        ("pair_share", 0.25, "25.0%"),
        ("rows", 1234567, "1,234,567"),
        ("val_logloss", 0.512345, "0.512"),
        ("published", False, "no"),
        ("verifier", "vm-3", "vm-3"),
        ("anything", None, "–"),
    ],
)
def test_figures_are_formatted_by_what_their_key_says(key: str, value: Any, shown: str) -> None:
    assert formatting.fmt_figure(key, value) == shown


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "x", [1], {"a": 1}, 1e300])
def test_a_formatter_never_raises(value: Any) -> None:
    for fmt in (
        formatting.fmt_time,
        formatting.fmt_count,
        formatting.fmt_share,
        formatting.fmt_age,
    ):
        assert isinstance(fmt(value), str)
