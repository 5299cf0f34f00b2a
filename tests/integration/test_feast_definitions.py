"""Applying the Feast definitions once: ``ensure_definitions`` and ``solaris namespace apply``.

A cycle task opens the store and calls ``ensure_definitions``: it must apply the definitions
of a namespace the registry does not hold yet, leave the registry untouched (not rewritten)
when it holds exactly them, and apply again when the settings that shape them changed. The
CLI's deploy step does the same and says which happened. Real Feast store on a copy of
``feature_repo/`` (file registry) and the test Redis database of ``conftest.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from solaris.config import SolarisConfig
from solaris.store import contract
from solaris.store.feast_store import ensure_definitions, open_feature_store

pytestmark = pytest.mark.integration


def _registry_file(cfg: SolarisConfig) -> Path:
    return cfg.store.repo_path / cfg.store.registry


def test_ensure_definitions_applies_a_new_namespace_then_only_reads(
    solaris_cfg: SolarisConfig, redis_connection: str
) -> None:
    store = open_feature_store(solaris_cfg, redis_connection)

    assert ensure_definitions(store, solaris_cfg) is True
    names = {view.name for view in store.list_feature_views()}
    assert set(contract.VIEWS) <= names | {v.name for v in store.list_on_demand_feature_views()}
    registry = _registry_file(solaris_cfg)
    before = (registry.read_bytes(), registry.stat().st_mtime_ns)

    # The same settings, a new process's store: nothing to apply, the registry not rewritten.
    again = open_feature_store(solaris_cfg, redis_connection)
    assert ensure_definitions(again, solaris_cfg) is False
    assert (registry.read_bytes(), registry.stat().st_mtime_ns) == before


def test_ensure_definitions_applies_again_when_the_settings_change_a_view(
    solaris_cfg: SolarisConfig, redis_connection: str
) -> None:
    store = open_feature_store(solaris_cfg, redis_connection)
    ensure_definitions(store, solaris_cfg)
    longer = solaris_cfg.selection.model_copy(update={"ttl_hours": 48.0})
    changed = solaris_cfg.model_copy(update={"selection": longer})
    expected = contract.PAIR.params(changed)
    assert expected != contract.PAIR.params(solaris_cfg)

    assert ensure_definitions(store, changed) is True
    store.refresh_registry()
    pair = store.get_feature_view(contract.PAIR.name)
    assert pair.ttl == timedelta(seconds=expected.retention_s)
    assert pair.tags["solaris.read_ttl_s"] == str(expected.read_ttl_s)
    assert ensure_definitions(store, changed) is False


def test_namespace_apply_registers_the_definitions_once(
    solaris_cfg: SolarisConfig, redis_connection: str, tmp_path: Path
) -> None:
    script = Path(sys.executable).with_name("solaris")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SOLARIS_")},
        "SOLARIS_NAMESPACE": solaris_cfg.namespace,
        "SOLARIS_STORE__REPO_PATH": str(solaris_cfg.store.repo_path),
        "SOLARIS_STORE__REDIS": redis_connection,
        "SOLARIS_MODEL__Z_DIM": str(solaris_cfg.model.z_dim),
        "SOLARIS_ARTIFACTS_DIR": str(tmp_path / "artifacts"),
    }

    def apply() -> str:
        done = subprocess.run(
            [str(script), "namespace", "apply"], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert f"{solaris_cfg.namespace}" in (first := apply())
    assert first.rstrip().endswith(": applied")
    assert apply().rstrip().endswith("already applied, unchanged")
    store = open_feature_store(solaris_cfg, redis_connection)
    assert ensure_definitions(store, solaris_cfg) is False
