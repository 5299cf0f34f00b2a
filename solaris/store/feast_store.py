"""Open the Feast store declared in ``feature_repo/`` with SolarisConfig's settings.

``feature_store.yaml`` stays the one declaration of the store; this module fills in the
values that belong to configuration (Redis connection, project, registry) and applies the
definitions of ``solaris_features.py`` built with the configuration it is given, exactly as
``feast apply`` would.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import yaml

from solaris.config import SolarisConfig
from solaris.errors import SolarisError
from solaris.namespace import Namespace
from solaris.store.connection import RedisTarget, redacted, unlink_matching
from solaris.store.keys import project_pattern

if TYPE_CHECKING:  # feast is heavy: imported only where a store is opened
    from feast import FeatureStore

    from solaris.store.online import SolarisOnlineStore

__all__ = [
    "DEFINITIONS_FILE",
    "FeatureStoreError",
    "apply_definitions",
    "delete_project_keys",
    "load_definitions",
    "online_store_of",
    "open_feature_store",
    "repo_config_dict",
]

DEFINITIONS_FILE = "solaris_features.py"


class FeatureStoreError(SolarisError, RuntimeError):
    """The feature repo or its configuration is unusable; the message says why."""


def repo_config_dict(
    cfg: SolarisConfig, redis: str, online: Mapping[str, object] | None = None
) -> dict:
    """``feature_store.yaml`` as a dict, with SOLARIS settings substituted.

    ``online`` overrides fields of the online store's configuration (for example
    ``{"retries": 0}`` for a serving process).
    """
    path = Path(cfg.store.repo_path) / "feature_store.yaml"
    if not path.is_file():
        raise FeatureStoreError(f"{path}: feature_store.yaml not found")
    # A connection that cannot be used fails here, naming the option (never its value).
    RedisTarget.parse(redis).check(cfg.store.redis_type)
    # The file is parsed first and the connection set in the parsed data: pasted into the
    # text, a password with '"', ':' or '#' would break the YAML (and show up in the parse
    # error). Only the connection given here is used: the repo never reads the ambient
    # environment (the Feast CLI's edge, feast_cli.py, builds its config from it).
    raw = _substitute(yaml.safe_load(path.read_text()), "${SOLARIS_STORE__REDIS}", redis)
    raw["project"] = Namespace.of(cfg).project
    raw["online_store"] = {
        **raw.get("online_store", {}),
        "connection_string": redis,
        "redis_type": cfg.store.redis_type,
        **(online or {}),
    }
    registry = cfg.store.registry
    if registry.startswith(("postgresql", "mysql", "sqlite:")):
        raw["registry"] = {"registry_type": "sql", "path": registry, "cache_ttl_seconds": 60}
    else:
        raw["registry"] = registry
    return raw


def _substitute(data: object, placeholder: str, value: str) -> Any:
    """``data`` (parsed YAML) with ``placeholder`` replaced by ``value`` in every string."""
    if isinstance(data, str):
        return data.replace(placeholder, value)
    if isinstance(data, dict):
        return {k: _substitute(v, placeholder, value) for k, v in data.items()}
    if isinstance(data, list):
        return [_substitute(v, placeholder, value) for v in data]
    return data


def open_feature_store(
    cfg: SolarisConfig, redis: str, *, online: Mapping[str, object] | None = None
) -> FeatureStore:
    """A ``feast.FeatureStore`` over ``cfg.store.repo_path`` using Redis at ``redis``."""
    from feast import FeatureStore
    from feast.repo_config import RepoConfig
    from pydantic import ValidationError

    repo = Path(cfg.store.repo_path).resolve()
    try:
        config = RepoConfig(**repo_config_dict(cfg, redis, online))
    except ValidationError as exc:
        # pydantic would echo the connection string, password included: name the settings.
        fields = sorted({".".join(map(str, e["loc"])) for e in exc.errors()})
        raise FeatureStoreError(
            f"{repo / 'feature_store.yaml'}: Feast rejects the store settings {fields} "
            f"(Redis {redacted(redis)})"
        ) from None
    config.repo_path = repo
    return FeatureStore(repo_path=str(repo), config=config)


def online_store_of(store: FeatureStore) -> SolarisOnlineStore:
    """The :class:`~solaris.store.online.SolarisOnlineStore` behind a Feast store."""
    from solaris.store.online import SolarisOnlineStore

    online = store._get_provider().online_store
    if not isinstance(online, SolarisOnlineStore):
        raise FeatureStoreError(
            f"the feature store's online store is {type(online).__name__}, not "
            "SolarisOnlineStore: set online_store.type in feature_store.yaml to "
            "solaris.store.online.SolarisOnlineStore"
        )
    return online


def load_definitions(repo_path: Path) -> ModuleType:
    """Import ``solaris_features.py`` from the repo (it is not an installed module)."""
    path = Path(repo_path) / DEFINITIONS_FILE
    spec = importlib.util.spec_from_file_location("solaris_feature_repo", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise FeatureStoreError(f"{path}: feature definitions not found")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def apply_definitions(store: FeatureStore, cfg: SolarisConfig) -> list[str]:
    """Register the repo's entities, views and service, built with ``cfg`` (as ``feast
    apply`` would); returns their names."""
    objects = load_definitions(cfg.store.repo_path).definitions(cfg)
    with _registry_lock(store):
        # Feast's file registry writes its whole cached contents back: refreshed under the
        # lock, an apply of one namespace never drops another namespace's project.
        store.refresh_registry()
        store.apply(objects)
    return sorted(obj.name for obj in objects)


@contextlib.contextmanager
def _registry_lock(store: FeatureStore) -> Iterator[None]:
    """An exclusive lock on a file registry (``<registry>.lock``) for one machine's
    processes; a SQL registry is transactional and takes none."""
    registry = store.config.registry
    path = registry if isinstance(registry, str) else getattr(registry, "path", "")
    if not path or "://" in str(path):
        yield
        return
    lock = Path(store.repo_path) / f"{path}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def delete_project_keys(client, project: str, extra_keys: Sequence[str] = ()) -> int:
    """Delete the Redis keys of one Feast project's SOLARIS views (``<project>:*``), plus
    ``extra_keys``; returns how many were removed. Other data is never touched."""
    removed = unlink_matching(client, project_pattern(project))
    if extra_keys:
        removed += client.unlink(*extra_keys)
    return removed
