"""What a user brings to SOLARIS: a foundation model, a verifier and traffic.

SOLARIS runs on any recommender through these interfaces, chosen by import path in the
configuration and loaded once at the task edge::

    model:
      foundation: "mypkg.fm:build"          # build(cfg) -> FoundationModel
      verifier: "solaris.adapters:logged_scores"   # the default: the score serving logged
    requests:
      source: "mypkg.traffic:build"         # build(cfg) -> TrafficSource (replays only)

``model.foundation`` and ``requests.source`` have no default: a task that needs one that is
unset raises :class:`~solaris.errors.ConfigError` naming the setting and the examples'
paths; ``model.trainer`` unset means the training DAG keeps the verifier. Each factory is
called with the :class:`~solaris.config.SolarisConfig` and returns an object with the
protocol's methods. The MovieLens implementation (``solaris.examples.movielens``)
and a synthetic one with its own, differently shaped FM (``solaris.examples.synthetic``)
are the worked examples. SOLARIS itself trains the autoencoder ``h -> z`` on the user's
``h`` and versions it with the FM (:mod:`solaris.pipeline.codes`).

Tables are pandas frames with the columns of :mod:`solaris.data.schemas`:
``request_id, user_id, item_id, ts`` (int64, epoch seconds), ``label`` (Int8, null when
unlabelled) and ``score`` (float32, the verifier's score when the request was served).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from solaris.config import IMPORT_PATH, env_variable
from solaris.errors import ConfigError, SolarisError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    import torch

    from solaris.config import SolarisConfig

__all__ = [
    "IMPORT_PATH",
    "AdapterError",
    "FoundationModel",
    "LoggedScores",
    "TrafficSource",
    "Verifier",
    "VerifierTrainer",
    "foundation_model",
    "load",
    "logged_scores",
    "traffic_requests",
    "traffic_source",
    "verifier",
    "verifier_trainer",
]

_IMPORT_PATH = re.compile(IMPORT_PATH)


class AdapterError(SolarisError, RuntimeError):
    """An adapter named in the configuration cannot be imported, built or used."""


@runtime_checkable
class FoundationModel(Protocol):
    """The user's foundation model, seen from SOLARIS.

    Attributes:
        version: identifies the weights and features; the autoencoder trained on this FM's
            ``h`` is versioned with it, and rows of another version are never served.
        shared_dim: width of ``h``.
    """

    version: str
    shared_dim: int

    def features(self, users: np.ndarray, items: np.ndarray, ts: np.ndarray) -> Any:
        """The FM's input batch for pairs ``(users[k], items[k])`` as of ``ts[k]``.

        Only data strictly before ``ts[k]`` may be used: a code computed at the end of an
        interval is served to later requests, never to the ones that selected it.
        """
        ...

    def shared(self, batch: Any) -> torch.Tensor:
        """The last shared layer ``h``, ``[B, shared_dim]`` float, for a batch of
        :meth:`features` (called under ``torch.inference_mode``)."""
        ...

    def to(self, device: torch.device) -> FoundationModel:
        """Move the weights to ``device`` (batches are moved by :meth:`shared`)."""
        ...


@runtime_checkable
class Verifier(Protocol):
    """Scores a request's candidates: the pairs worth precomputing score highest."""

    version: str

    def score(self, candidates: pd.DataFrame) -> np.ndarray:
        """One float per row of ``candidates`` (request-log rows), higher is better."""
        ...


@runtime_checkable
class TrafficSource(Protocol):
    """Requests with their candidates, labels where known and the scores serving logged.

    The live cycle's requests come from serving (the request-log stream); a traffic source
    replays history through the same serving path (the demo, a backfill).
    """

    def requests(self, start: int, end: int) -> pd.DataFrame:
        """Candidate rows of the requests with ``start <= ts < end``, sorted by ``ts``
        (columns ``request_id, user_id, item_id, ts, label, score``)."""
        ...


@runtime_checkable
class VerifierTrainer(Protocol):
    """Optional: retrains the VM behind the verifier (the training DAG calls it)."""

    def retrain(self, cfg: SolarisConfig, as_of: int) -> dict[str, Any]:
        """Retrain on labelled impressions before ``as_of``; return the run's record."""
        ...


class LoggedScores:
    """The default verifier: the score serving logged with each candidate.

    In production the VM scores every candidate online anyway; that score is the verifier
    (the paper's speculation), so selection needs no forward pass of its own. Rows without
    a logged score (a missed pair that no logged request holds) rank last.
    """

    version = "logged"

    def __init__(self, cfg: SolarisConfig | None = None) -> None:
        pass  # nothing to configure: the class is its own factory too

    def score(self, candidates: pd.DataFrame) -> np.ndarray:
        import numpy as np

        if "score" not in candidates.columns:
            raise AdapterError(
                "the request log has no 'score' column: serving must log the verifier's "
                "scores (SolarisFeatures.log_request), or configure model.verifier"
            )
        scores = candidates["score"].to_numpy(np.float64, na_value=np.nan)
        return np.where(np.isnan(scores), -np.inf, scores)


def logged_scores(cfg: SolarisConfig) -> LoggedScores:
    """Factory of :class:`LoggedScores` (``model.verifier`` default)."""
    return LoggedScores()


def _members(protocol: type) -> list[str]:
    """The attributes and methods a protocol requires (its annotations and functions)."""
    names = set(getattr(protocol, "__annotations__", {}))
    names |= {k for k, v in vars(protocol).items() if callable(v) and not k.startswith("_")}
    return sorted(names)


def load(path: str, cfg: SolarisConfig, protocol: type, setting: str) -> Any:
    """Import ``package.module:factory``, call ``factory(cfg)`` and check the protocol.

    ``factory`` is a function or a class taking the settings; anything else at that path is
    used as it is (an object that already implements the protocol).

    Raises:
        AdapterError: naming ``setting`` when the path is malformed, the import or the
            factory fails, or the object lacks the protocol's members.
    """
    if not isinstance(path, str) or not _IMPORT_PATH.fullmatch(path):
        raise AdapterError(f"{setting}: {path!r} is not an import path 'package.module:factory'")
    module_name, attr = path.split(":")
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:  # whatever the module's own code raises or exits
        raise AdapterError(
            f"{setting}: cannot import {path!r}: {type(exc).__name__}: {exc}"
        ) from exc
    try:
        factory = getattr(module, attr)
    except AttributeError as exc:
        raise AdapterError(f"{setting}: cannot import {path!r}: {exc}") from exc
    if inspect.isclass(factory) or inspect.isfunction(factory) or inspect.ismethod(factory):
        try:
            obj = factory(cfg)
        except (Exception, SystemExit) as exc:
            raise AdapterError(
                f"{setting}: {path!r} failed to build: {type(exc).__name__}: {exc}"
            ) from exc
    else:
        obj = factory
    missing = [name for name in _members(protocol) if not hasattr(obj, name)]
    if missing:
        raise AdapterError(
            f"{setting}: {path!r} gave a {type(obj).__name__}, not a {protocol.__name__} "
            f"(missing: {', '.join(missing)})"
        )
    return obj


# A worker process runs one task; dag.test() (the demo, the tests) runs many in one process,
# so each adapter is built once per (path, settings): settings objects are frozen.
@functools.lru_cache(maxsize=8)
def _cached(path: str, cfg: SolarisConfig, protocol: type, setting: str) -> Any:
    return load(path, cfg, protocol, setting)


# What a missing adapter setting's error offers: the documented choices (docs/adopting.md).
_CHOICES = {
    "model.foundation": "your FoundationModel factory, or an example's: "
    "'solaris.examples.movielens:foundation_model', 'solaris.examples.synthetic:foundation_model'",
    "requests.source": "your TrafficSource factory, or an example's: "
    "'solaris.examples.movielens:traffic', 'solaris.examples.synthetic:traffic'",
}


def _required(path: str | None, setting: str) -> str:
    """``path``, the import path a setting names; :class:`ConfigError` when it is unset (the
    product has no default: an adopter who forgets one must not run an example's)."""
    if path is None:
        section, name = setting.split(".")
        raise ConfigError(
            f"{setting} is not set: name {_CHOICES[setting]} (in the settings file "
            f"'{section}: {{{name}: ...}}', or {env_variable(setting)})"
        )
    return path


def foundation_model(cfg: SolarisConfig) -> FoundationModel:
    """The FM of ``model.foundation``."""
    path = _required(cfg.model.foundation, "model.foundation")
    return _cached(path, cfg, FoundationModel, "model.foundation")


def verifier(cfg: SolarisConfig) -> Verifier:
    """The verifier of ``model.verifier`` (default: the scores serving logged)."""
    return _cached(cfg.model.verifier, cfg, Verifier, "model.verifier")


def traffic_source(cfg: SolarisConfig) -> TrafficSource:
    """The traffic of ``requests.source``, which replays feed through serving."""
    path = _required(cfg.requests.source, "requests.source")
    return _cached(path, cfg, TrafficSource, "requests.source")


def traffic_requests(cfg: SolarisConfig, start: int, end: int) -> pd.DataFrame:
    """``requests.source``'s requests in ``[start, end)``, their columns checked here, at
    the edge: a source that leaves one out is an :class:`AdapterError` naming the setting
    and the columns, not a ``KeyError`` deep in a task."""
    import pandas as pd

    from solaris.store.contract import ITEM_ID, REQUEST_ID, SCORE, USER_ID

    frame = traffic_source(cfg).requests(start, end)
    where = f"requests.source: {cfg.requests.source!r}"
    if not isinstance(frame, pd.DataFrame):
        raise AdapterError(f"{where} gave a {type(frame).__name__}, not a pandas DataFrame")
    needed = (REQUEST_ID, USER_ID, ITEM_ID, "ts", "label", SCORE)
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise AdapterError(
            f"{where} gave requests without the columns {missing}; a TrafficSource gives "
            f"{list(needed)} ({SCORE}: the score serving logged, NaN where none; label: NaN "
            "where unknown)"
        )
    return frame


def verifier_trainer(cfg: SolarisConfig) -> VerifierTrainer | None:
    """The trainer of ``model.trainer``, or None when none is configured."""
    if cfg.model.trainer is None:
        return None
    return _cached(cfg.model.trainer, cfg, VerifierTrainer, "model.trainer")
