"""Open the Feast store declared in ``feature_repo/`` with SolarisConfig's settings.

``feature_store.yaml`` stays the one declaration of the store; this module fills in the
values that belong to configuration (Redis connection, project, registry) and applies the
definitions of ``solaris_features.py`` built with the configuration it is given, exactly as
``feast apply`` would.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import yaml

from solaris.config import SolarisConfig
from solaris.connection import RedisTarget, redacted, unlink_matching
from solaris.errors import SolarisError
from solaris.namespace import Namespace
from solaris.store.contract import FEATURE_SERVICE
from solaris.store.keys import project_pattern

if TYPE_CHECKING:  # feast is heavy: imported only where a store is opened
    from feast import FeatureStore

    from solaris.store.online import SolarisOnlineStore

__all__ = [
    "DEFINITIONS_FILE",
    "FeatureStoreError",
    "apply_definitions",
    "delete_project_keys",
    "ensure_definitions",
    "load_definitions",
    "online_store_of",
    "open_feature_store",
    "repo_config_dict",
    "require_applied",
]

DEFINITIONS_FILE = "solaris_features.py"
# The tag of the registered FeatureService that holds the fingerprint of the definitions it
# was applied with (:func:`ensure_definitions`).
DEFINITIONS_TAG = "solaris.definitions"


class FeatureStoreError(SolarisError, RuntimeError):
    """The feature repo or its configuration is unusable; the message says why."""


def repo_config_dict(
    cfg: SolarisConfig, redis: str | RedisTarget, online: Mapping[str, object] | None = None
) -> dict:
    """``feature_store.yaml`` as a dict, with SOLARIS settings substituted.

    ``online`` overrides fields of the online store's configuration (for example
    ``{"retries": 0}`` for a serving process).
    """
    path = Path(cfg.store.repo_path) / "feature_store.yaml"
    if not path.is_file():
        raise FeatureStoreError(f"{path}: feature_store.yaml not found")
    # A connection that cannot be used fails here, naming the option (never its value).
    redis = RedisTarget.of(redis)
    redis.check(cfg.store.redis_type)
    # The file is parsed first and the connection set in the parsed data: pasted into the
    # text, a password with '"', ':' or '#' would break the YAML (and show up in the parse
    # error). Only the connection given here is used: the repo never reads the ambient
    # environment (the Feast CLI's edge, feast_cli.py, builds its config from it).
    raw = _substitute(
        yaml.safe_load(path.read_text()), "${SOLARIS_STORE__REDIS}", redis.connection_string
    )
    raw["project"] = Namespace.of(cfg).project
    raw["online_store"] = {
        **{k: v for k, v in raw.get("online_store", {}).items() if k != "connection_env"},
        "connection_string": redis.connection_string,
        "redis_type": cfg.store.redis_type,
        **(online or {}),
    }
    registry = cfg.store.registry
    if _is_sql_registry(registry):
        url = _sql_registry_url(registry)
        raw["registry"] = {
            "registry_type": "sql",
            "path": url,
            "cache_ttl_seconds": 60,
            "sqlalchemy_config_kwargs": {"echo": False, **_sql_connect_args(url)},
        }
    else:
        raw["registry"] = registry
    return raw


# A SQL registry on PostgreSQL goes through psycopg2 (psycopg2-binary, already in the lock for
# Airflow's metadata database). Feast rewrites a bare ``postgresql://`` to psycopg (v3), which
# SOLARIS does not install, so a bare URL is given psycopg2 here first.
_PG_DRIVER_URL = "postgresql+psycopg2://"
_SQL_REGISTRY_PREFIXES = ("postgresql", "mysql", "sqlite:")
_SQL_CONNECT_TIMEOUT_S = 10  # an unanswering host fails the open, it does not hang it
# PostgreSQL advisory lock ("SOLARIS" in ASCII) held while a process creates the registry's
# tables or applies definitions: Feast's SQL registry checks, then inserts, so two at once
# fail on a unique constraint without it.
_SQL_REGISTRY_LOCK_KEY = 0x534F4C41524953


def _is_sql_registry(registry: str) -> bool:
    return registry.startswith(_SQL_REGISTRY_PREFIXES)


def _sql_registry_url(registry: str) -> str:
    """``registry`` with a bare ``postgresql://`` given the psycopg2 driver."""
    if registry.startswith("postgresql://"):
        return _PG_DRIVER_URL + registry[len("postgresql://") :]
    return registry


def _sql_connect_args(url: str) -> dict[str, object]:
    """SQLAlchemy engine options for the registry at ``url`` (a connect timeout on
    PostgreSQL: libpq's default waits as long as the network does)."""
    if url.startswith("postgresql"):
        return {"connect_args": {"connect_timeout": _SQL_CONNECT_TIMEOUT_S}}
    return {}


def _registry_label(url: str) -> tuple[str, str | None]:
    """The registry URL for an error message, its password replaced by ``***``, and the
    password (to mask wherever else it appears)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:  # unparsable: show the scheme only, it may hold anything after
        return f"{url.partition(':')[0]}:***", None
    return parsed.render_as_string(hide_password=True), parsed.password


@contextlib.contextmanager
def _sql_registry_errors(url: str) -> Iterator[None]:
    """Turn a SQL registry's driver and database failures into a :class:`FeatureStoreError`
    naming the registry, its password redacted (also out of the chained traceback)."""
    from sqlalchemy.exc import DBAPIError, SQLAlchemyError

    label, password = _registry_label(url)
    try:
        yield
    except ImportError as exc:
        if not exc.name or exc.name.partition(".")[0] not in url.partition(":")[0]:
            raise  # not the driver the URL names
        raise FeatureStoreError(
            f"SQL registry {label}: its driver module {exc.name!r} is not installed; "
            f"for PostgreSQL use {_PG_DRIVER_URL}... (psycopg2 is installed)"
        ) from None
    except SQLAlchemyError as exc:
        cause = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
        reason = " ".join(str(cause).split()).replace(url, label)
        if password:
            reason = reason.replace(str(password), "***")
        raise FeatureStoreError(f"SQL registry {label} cannot be used: {reason}") from None


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
    cfg: SolarisConfig, redis: str | RedisTarget, *, online: Mapping[str, object] | None = None
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
    # The built online-store settings in place of their dict, so that the RepoConfig's repr
    # (in a log, a traceback) shows the redacted connection string, not the password.
    config.online_config = config.online_store
    store = FeatureStore(repo_path=str(repo), config=config)
    if _is_sql_registry(cfg.store.registry):
        # Feast connects to a SQL registry (and creates its tables) on first use: do it here,
        # under the lock, so a registry that cannot be used fails where the store is opened.
        with _registry_lock(store):
            store.registry  # noqa: B018 - the property builds the registry
    return store


def require_applied(cfg: SolarisConfig, redis: str | RedisTarget) -> None:
    """Refuse, in one line and before anything is written, a namespace whose views were
    never applied to the registry (a mistyped ``--namespace``): serving it would fail on
    every request, and a near-line embedder would register it and wait forever."""
    from feast.errors import FeastObjectNotFoundException

    from solaris.store.contract import FEATURE_SERVICE

    store = open_feature_store(cfg, redis)
    try:
        store.get_feature_service(FEATURE_SERVICE)
    except FeastObjectNotFoundException:
        where = cfg.store.registry or f"the repo {cfg.store.repo_path}"
        raise FeatureStoreError(
            f"namespace {cfg.namespace!r} has no views in the feature registry ({where}): "
            "nothing was applied for it. Check --namespace, or run its cycle once (solaris "
            "demo, or the DAGs) to apply them"
        ) from None


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
    apply`` would); returns their names. The service is tagged with the definitions'
    fingerprint, for :func:`ensure_definitions`."""
    objects, _ = _tagged_definitions(cfg)
    with _registry_lock(store):
        # Feast's file registry writes its whole cached contents back: refreshed under the
        # lock, an apply of one namespace never drops another namespace's project.
        store.refresh_registry()
        store.apply(objects)
    return sorted(obj.name for obj in objects)


def ensure_definitions(store: FeatureStore, cfg: SolarisConfig) -> bool:
    """Apply the definitions built with ``cfg`` unless the registry already holds exactly
    them (the fingerprint tag of its FeatureService matches); returns whether it applied.

    What a cycle task calls: the deploy step (``solaris namespace apply``) or the first task
    of a new namespace applies, every later task reads one registry entry instead of
    rewriting the registry (which, on a file registry, serialises the tasks on its lock).
    """
    from feast.errors import FeatureServiceNotFoundException

    objects, fingerprint = _tagged_definitions(cfg)
    try:
        registered = store.get_feature_service(FEATURE_SERVICE, allow_cache=True)
    except FeatureServiceNotFoundException:  # a namespace not applied yet
        registered = None
    if registered is not None and registered.tags.get(DEFINITIONS_TAG) == fingerprint:
        return False
    with _registry_lock(store):
        store.refresh_registry()
        store.apply(objects)
    return True


def _tagged_definitions(cfg: SolarisConfig) -> tuple[list[Any], str]:
    """The repo's definitions built with ``cfg``, the FeatureService tagged with their
    fingerprint (returned too): a digest of every object's proto without its registry
    metadata."""
    objects = load_definitions(cfg.store.repo_path).definitions(cfg)
    digest = hashlib.sha256()
    for obj in sorted(objects, key=lambda o: (type(o).__name__, o.name)):
        spec = obj.to_proto().spec
        _clear_meta(spec)
        digest.update(type(obj).__name__.encode())
        digest.update(spec.SerializeToString(deterministic=True))
    fingerprint = digest.hexdigest()[:16]
    [service] = [obj for obj in objects if obj.name == FEATURE_SERVICE]
    service.tags[DEFINITIONS_TAG] = fingerprint
    return objects, fingerprint


def _clear_meta(message: Any) -> None:
    """Clear every ``meta`` field (creation and update times) of a proto, recursively."""
    for field, value in message.ListFields():
        if field.name == "meta":
            message.ClearField("meta")
        elif field.type != field.TYPE_MESSAGE:
            continue
        elif field.message_type.GetOptions().map_entry:
            for item in value.values():
                if hasattr(item, "ListFields"):  # a map of scalars holds no message
                    _clear_meta(item)
        elif field.is_repeated:
            for item in value:
                _clear_meta(item)
        else:
            _clear_meta(value)


@contextlib.contextmanager
def _registry_lock(store: FeatureStore) -> Iterator[None]:
    """An exclusive lock on the registry while it is set up or written.

    A file registry: ``<registry>.lock``, for one machine's processes. A SQL registry on
    PostgreSQL: a transaction-level advisory lock in that database, for every machine (other
    SQL databases take none). Failures of a SQL registry become :class:`FeatureStoreError`.
    """
    registry = store.config.registry
    path = registry if isinstance(registry, str) else getattr(registry, "path", "")
    if getattr(registry, "registry_type", None) == "sql":
        with _sql_registry_errors(path), _sql_advisory_lock(registry):
            yield
        return
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


@contextlib.contextmanager
def _sql_advisory_lock(registry) -> Iterator[None]:
    """Hold :data:`_SQL_REGISTRY_LOCK_KEY` on a PostgreSQL registry (its own short-lived
    connection; released when its transaction ends, whatever happens)."""
    if not registry.path.startswith("postgresql"):
        yield
        return
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    engine = create_engine(registry.path, poolclass=NullPool, **registry.sqlalchemy_config_kwargs)
    try:
        with engine.begin() as conn:
            conn.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SQL_REGISTRY_LOCK_KEY}
            )
            yield
    finally:
        engine.dispose()


def delete_project_keys(client, project: str, extra_keys: Sequence[str] = ()) -> int:
    """Delete the Redis keys of one Feast project's SOLARIS views (``<project>:*``), plus
    ``extra_keys``; returns how many were removed. Other data is never touched."""
    removed = unlink_matching(client, project_pattern(project))
    if extra_keys:
        removed += client.unlink(*extra_keys)
    return removed
