"""docs/configuration.md is generated from the settings' descriptions and kept current."""

from __future__ import annotations

from pathlib import Path

from solaris.config_reference import REFERENCE_PATH, reference, undescribed

ROOT = Path(__file__).resolve().parents[2]


def test_every_setting_has_a_description() -> None:
    assert undescribed() == []


def test_the_committed_reference_is_the_generated_one() -> None:
    committed = (ROOT / REFERENCE_PATH).read_text(encoding="utf-8")
    assert committed == reference(), (
        f"{REFERENCE_PATH} is stale: run `make docs` (python -m solaris.config_reference)"
    )


def test_the_reference_names_every_setting_with_its_variable_and_default() -> None:
    text = reference()
    assert "| `selection.share` | `SOLARIS_SELECTION__SHARE` | `0.2` | float, > 0 and ≤ 1 |" in text
    assert (
        "| `store.redis` | `SOLARIS_STORE__REDIS` | unset | Redis connection string "
        "`host:port[,option=value...]`, or unset |" in text
    )
    assert (
        "`selection.ttl_hours` | `SOLARIS_SELECTION__TTL_HOURS` | `6` | float, ≥ 1 s and ≤ 3650 d"
        in text
    )
