"""Open the Feast store declared in ``feature_repo/`` with SolarisConfig's settings.

``feature_store.yaml`` stays the one declaration of the store; this module fills in the
values that belong to configuration (Redis connection, project, registry) and applies the
definitions of ``solaris_features.py``, exactly as ``feast apply`` would.
"""

from __future__ import annotations

import importlib.util
import os
import string
from pathlib import Path
from types import ModuleType

import yaml

from solaris.config import SolarisConfig

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


def open_feature_store(cfg: SolarisConfig, redis: str):
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


def apply_definitions(store, repo_path: Path) -> list[str]:
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
