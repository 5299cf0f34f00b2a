"""Namespace: where a namespace's state and offline rows live, locally or in a bucket."""

from __future__ import annotations

from pathlib import Path

import pytest

from solaris.config import SolarisConfig
from solaris.files import is_local
from solaris.namespace import Namespace


def test_by_default_the_state_is_under_artifacts_and_the_offline_rows_in_the_repo(
    tmp_path: Path,
) -> None:
    ns = Namespace.of(
        SolarisConfig(
            namespace="demo", artifacts_dir=tmp_path, store={"repo_path": tmp_path / "repo"}
        )
    )

    assert ns.cycle_root == tmp_path / "namespaces" / "demo" and is_local(ns.cycle_root)
    assert ns.offline_root == tmp_path / "repo" / "data" / "offline" / "demo"
    assert ns.offline_source("pair") == "data/offline/demo/pair"  # relative: the repo can move
    assert ns.models_dir == tmp_path / "models"


def test_uris_move_the_state_and_the_offline_rows_into_a_bucket(tmp_path: Path) -> None:
    cfg = SolarisConfig(
        namespace="live",
        artifacts_dir=tmp_path,
        cycle={"state_uri": "s3://bucket/solaris"},
        store={"offline_uri": "s3://bucket/offline/"},
    )
    ns = Namespace.of(cfg)

    assert str(ns.cycle_root) == "s3://bucket/solaris/namespaces/live"
    assert not is_local(ns.cycle_root)
    assert str(ns.offline_root) == "s3://bucket/offline/live"
    assert ns.offline_source("uagg") == "s3://bucket/offline/live/uagg"
    assert ns.models_dir == tmp_path / "models"  # inputs: shipped with every worker


def test_a_relative_offline_uri_is_taken_from_the_repo_as_feast_does(tmp_path: Path) -> None:
    cfg = SolarisConfig(
        namespace="live", store={"repo_path": tmp_path / "repo", "offline_uri": "rows"}
    )
    ns = Namespace.of(cfg)
    assert ns.offline_root == tmp_path / "repo" / "rows" / "live"
    assert ns.offline_source("pair") == "rows/live/pair"


@pytest.mark.parametrize("name", ["demo\n", "Demo", "1demo", "", "d-emo", "d" * 41])
def test_a_name_that_is_not_a_whole_namespace_name_is_refused(name: str, tmp_path: Path) -> None:
    """``demo\\n`` passed a ``^...$`` match (``$`` matches before a final newline)."""
    with pytest.raises(ValueError, match="is not a namespace name"):
        Namespace(name, tmp_path, tmp_path)
