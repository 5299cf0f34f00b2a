"""Where Feast's offline rows of a view live, and which of its files are data.

The views' FileSources name the folders (:meth:`solaris.namespace.Namespace.offline_source`:
``<repo>/data/offline/<ns>/<view>`` by default, ``<store.offline_uri>/<ns>/<view>`` on S3);
the writer (:mod:`solaris.pipeline.materialize`) and the training-set reader
(:mod:`solaris.serving.training_set`) take them from the store's registry, so they read and
write exactly where Feast's own offline join reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from solaris.files import StatePath, state_path
from solaris.store import contract
from solaris.store.contract import InvalidWriteError

if TYPE_CHECKING:
    from feast import FeatureStore

__all__ = ["offline_dir", "published_files", "source_path"]


def source_path(store: FeatureStore, view: Any) -> StatePath | None:
    """The folder or file the file source of feature view ``view`` reads (a local path, or
    an ``s3://`` one); ``None`` for a source that is not a file source."""
    path = getattr(view.batch_source, "path", None)
    if not path:
        return None
    if "://" in str(path):
        return state_path(str(path), **_endpoint(view.batch_source))
    local = Path(path)
    return state_path(local if local.is_absolute() else Path(store.repo_path) / local)


def _endpoint(source: Any) -> dict[str, str]:
    """The S3 endpoint the FileSource names (store.offline_s3_endpoint), as s3fs takes it:
    SOLARIS writes where Feast reads."""
    endpoint = getattr(source, "s3_endpoint_override", None)
    return {"endpoint_url": endpoint} if endpoint else {}


def offline_dir(store: FeatureStore, view: str) -> StatePath:
    """Where the offline rows of SOLARIS view ``view`` go, as the store's registry declares
    its FileSource: a path relative to the repo always under ``<repo>/data/``, an absolute
    one or a URL (``store.offline_uri``) always ``.../<project>/<view>``
    (:class:`~solaris.store.contract.InvalidWriteError` otherwise, and for any name that is
    not a SOLARIS view)."""
    spec = contract.view(view)
    feature_view = store.get_feature_view(spec.name)
    declared = str(feature_view.batch_source.path)
    folder = source_path(store, feature_view)
    if "://" in declared or Path(declared).is_absolute():  # store.offline_uri
        if not declared.rstrip("/").endswith(f"/{store.project}/{spec.name}"):
            raise InvalidWriteError(
                f"view {view!r}: offline path {declared} is not .../{store.project}/{spec.name}"
            )
        return folder if "://" in declared else state_path(Path(folder).resolve())
    data = (Path(store.repo_path) / "data").resolve()
    resolved = Path(folder).resolve()
    if not resolved.is_relative_to(data):
        raise InvalidWriteError(f"view {view!r}: offline path {resolved} is outside {data}")
    return state_path(resolved)


def published_files(folder: StatePath) -> list[StatePath]:
    """The published offline files under ``folder`` (``*.parquet``, not hidden): what the
    offline readers take, never a staged or temporary file."""
    folder = state_path(folder)
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.rglob("*.parquet") if not p.name.startswith(".")), key=str)
