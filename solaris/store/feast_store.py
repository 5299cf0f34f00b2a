"""Open the Feast store declared in ``feature_repo/`` with SolarisConfig's settings.

``feature_store.yaml`` stays the one declaration of the store; this module fills in the
values that belong to configuration (Redis connection, project, registry) and applies the
definitions of ``solaris_features.py``, exactly as ``feast apply`` would.
"""

from __future__ import annotations

import importlib.util
import os
import string
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import redis as redis_py
import yaml

from solaris.config import SolarisConfig

if TYPE_CHECKING:  # feast is heavy: imported only where a store is opened
    from feast import FeatureStore

DEFINITIONS_FILE = "solaris_features.py"


class FeatureStoreError(RuntimeError):
    """The feature repo or its configuration is unusable; the message says why."""


def repo_config_dict(cfg: SolarisConfig, redis: str) -> dict:
    """``feature_store.yaml`` as a dict, with SOLARIS settings substituted."""
    path = Path(cfg.store.repo_path) / "feature_store.yaml"
    if not path.is_file():
        raise FeatureStoreError(f"{path}: feature_store.yaml not found")
    text = string.Template(path.read_text()).safe_substitute(
        {**os.environ, "SOLARIS_STORE__REDIS": redis}
    )
    raw = yaml.safe_load(text)
    raw["project"] = cfg.store.project
    registry = cfg.store.registry
    if registry.startswith(("postgresql", "mysql", "sqlite:")):
        raw["registry"] = {"registry_type": "sql", "path": registry, "cache_ttl_seconds": 60}
    else:
        raw["registry"] = registry
    return raw


def open_feature_store(cfg: SolarisConfig, redis: str) -> FeatureStore:
    """A ``feast.FeatureStore`` over ``cfg.store.repo_path`` using Redis at ``redis``."""
    from feast import FeatureStore
    from feast.repo_config import RepoConfig

    repo = Path(cfg.store.repo_path).resolve()
    config = RepoConfig(**repo_config_dict(cfg, redis))
    config.repo_path = repo
    return FeatureStore(repo_path=str(repo), config=config)


def load_definitions(repo_path: Path) -> ModuleType:
    """Import ``solaris_features.py`` from the repo (it is not an installed module)."""
    path = Path(repo_path) / DEFINITIONS_FILE
    spec = importlib.util.spec_from_file_location("solaris_feature_repo", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise FeatureStoreError(f"{path}: feature definitions not found")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def apply_definitions(store: FeatureStore, repo_path: Path) -> list[str]:
    """Register every entity, view and service of the repo; returns their names."""
    from feast import Entity, FeatureService, FeatureView

    module = load_definitions(repo_path)
    objects = [
        obj
        for obj in vars(module).values()
        if isinstance(obj, Entity | FeatureView | FeatureService)
    ]
    store.apply(objects)
    return sorted(obj.name for obj in objects)


def delete_project_keys(
    client: redis_py.Redis, project: str, extra_keys: Sequence[str] = ()
) -> int:
    """Delete the Redis hashes of one Feast project (its keys end with the project name),
    plus ``extra_keys``; returns how many were removed. Other data is never touched.

    Note that a project whose name ends with this one's (``x`` and ``my_x``) would match too.
    """
    suffix = project.encode()
    removed = 0
    batch: list[bytes] = []
    for key in client.scan_iter(match=b"*" + suffix, count=1000):
        if key.endswith(suffix):
            batch.append(key)
        if len(batch) >= 1000:
            removed += client.unlink(*batch)
            batch.clear()
    if batch:
        removed += client.unlink(*batch)
    if extra_keys:
        removed += client.unlink(*extra_keys)
    return removed
