"""Point-in-time training rows that equal what serving would have returned at that time.

``build_training_set`` asks Feast's offline store for the ``solaris_serving`` features of each
impression as of its timestamp (``get_historical_features``: for each view, the latest row
with ``ts − ttl <= event_ts <= ts``; one call per view of the FeatureService, see
``_view_as_of`` for the Feast 0.67 behaviour that forces this), decodes them into the same
:class:`~solaris.store.codec.ViewRows` the online store returns, and applies the *same*
:func:`~solaris.serving.tiers.assemble_tiers` as the serving client with ``now = ts`` per row.
The offline join only narrows what is visible; the freshness, version and exclusion rules
are applied by ``assemble_tiers`` from the ``computed_at`` / ``fm_version`` features, exactly
as online. So for a given (user, item, time), the training row equals the served row whenever
the online store held that time's latest rows.

One requirement on the definitions follows: the offline join drops a ``pair`` row older than
``pair``'s ``FeatureView.ttl``, while serving still sees it in Redis and uses it (not as a
hit, but) to remove the item from the user aggregate. For both paths to agree on that
exclusion, the ``pair`` view's retention (its ``ttl``) covers the window of the oldest
aggregate that can be served (:data:`solaris.store.contract.PAIR`).
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from solaris.config import SolarisConfig
from solaris.files import arrow_source
from solaris.serving.tiers import (
    TierFeatures,
    TierInputError,
    assemble_tiers,
    empty_tiers,
    tier_settings,
)
from solaris.store.codec import ViewRows, rows_from_table
from solaris.store.contract import (
    COMPUTED_AT,
    EVENT_TS,
    FEATURE_SERVICE,
    ITEM_ID,
    SERVING_VIEWS,
    USER_ID,
)
from solaris.store.feast_store import FeatureStoreError
from solaris.store.offline import published_files, source_path

__all__ = ["build_training_set"]

log = logging.getLogger(__name__)

_ROW = "solaris_row"  # carried through the join to restore the input order


def _check_impressions(impressions: pd.DataFrame) -> pd.DataFrame:
    if not isinstance(impressions, pd.DataFrame):
        raise TierInputError(f"impressions must be a DataFrame, got {type(impressions).__name__}")
    missing = [c for c in (USER_ID, ITEM_ID, "ts") if c not in impressions.columns]
    if missing:
        raise TierInputError(f"impressions is missing columns {missing}")
    out = {}
    for c in (USER_ID, ITEM_ID, "ts"):
        col = impressions[c]
        if col.isna().any():
            raise TierInputError(f"impressions.{c} has missing values")
        if pd.api.types.is_datetime64_any_dtype(col):
            if c != "ts":
                raise TierInputError(f"impressions.{c} must be integers, got dtype {col.dtype}")
            col = pd.to_datetime(col, utc=True).dt.as_unit("s").astype("int64")
        elif not pd.api.types.is_integer_dtype(col):
            raise TierInputError(f"impressions.{c} must be integers, got dtype {col.dtype}")
        values = col.to_numpy(np.int64)
        if c != "ts" and (values < 0).any():
            raise TierInputError(f"impressions.{c} must be >= 0")
        out[c] = values
    return pd.DataFrame(out)


def _has_offline_data(store, view) -> bool:
    """False when a file source has no published file yet (Feast would raise on it): a
    folder holding only staged files of a batch whose online write has not succeeded
    (:mod:`solaris.pipeline.materialize`) has no data for training."""
    full = source_path(store, view)
    if full is None:
        return True  # not a file source: let Feast answer
    return full.is_file() or bool(published_files(full))


def _first_events(store, view, keys: list[str], until: int) -> pd.DataFrame | None:
    """The first event time (epoch s, ``first_ts``) of each key in a file source (local or
    on S3), over events up to ``until`` only; ``None`` for other sources."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    full = source_path(store, view)
    if full is None:
        return None
    ts_col = view.batch_source.timestamp_field
    # The published files only: what Feast's reader takes too (never a staged batch).
    files = [full] if full.is_file() else published_files(full)
    located = [arrow_source(p) for p in files]
    filesystem = located[0][1] if located else None
    dataset = ds.dataset([where for where, _ in located], format="parquet", filesystem=filesystem)
    bound = pa.scalar(until * 1_000_000, pa.timestamp("us", tz="UTC"))
    table = dataset.to_table(columns=[*keys, ts_col], filter=pc.field(ts_col) <= bound)
    first = table.group_by(keys).aggregate([(ts_col, "min")])
    seconds = pc.cast(pc.cast(first[f"{ts_col}_min"], pa.timestamp("s", tz="UTC")), pa.int64())
    return first.drop_columns([f"{ts_col}_min"]).append_column("first_ts", seconds).to_pandas()


def _view_as_of(store, projection, imp: pd.DataFrame, cfg: SolarisConfig) -> ViewRows:
    """One view's rows as of each impression, aligned with ``imp``'s rows.

    Queries the distinct (join keys, ts) of ``imp`` only, then maps the answer back to every
    row; a (keys, ts) that Feast returns no row for gets nulls. Both steps work around the
    file (dask) offline store of Feast 0.67, which (a) *drops* an entity row when the view
    has rows for its keys but none inside ``[ts − ttl, ts]`` (``_filter_ttl`` keeps only
    rows whose keys match nothing), so a stale ``pair`` row would also remove that
    impression's ``uagg``/``iagg`` values when views are joined in one call, (b)
    de-duplicates on the join keys seen so far plus the timestamp, which collapses repeated
    impressions, and (c) fails on an entity row whose keys have no event at or before it.
    """
    view = store.get_feature_view(projection.name)
    spec = next(s for s in SERVING_VIEWS if s.name == view.name)
    params = spec.params(cfg)
    keys = [projection.join_key_map.get(c.name, c.name) for c in view.entity_columns]
    refs = [f"{projection.name_to_use()}:{f.name}" for f in projection.features]
    names = [f"{projection.name_to_use()}__{f.name}" for f in projection.features]
    if not _has_offline_data(store, view):
        log.warning("view %s has no offline data yet: its features are null", view.name)
        return ViewRows.empty(spec, params, len(imp))
    distinct = imp[[*keys, "ts"]].drop_duplicates().reset_index(drop=True)
    # (c) a row whose keys have no event at or before its time makes the dask join fail
    # ("Divisions calculation failed": a null event_ts). Its answer is null anyway, so
    # only rows with an earlier event of their keys are asked for.
    query = distinct
    first = _first_events(store, view, keys, until=int(distinct["ts"].max()))
    if first is not None:
        seen = distinct.merge(first, on=keys, how="left")["first_ts"].to_numpy(np.float64)
        query = distinct[distinct["ts"].to_numpy() >= seen]  # NaN (never seen) is False
    answer = pd.DataFrame({n: pd.Series(dtype=object) for n in names})
    answer.index.name = _ROW
    if len(query):
        entity_df = query[keys].copy()
        entity_df["event_timestamp"] = pd.to_datetime(query["ts"].to_numpy(), unit="s", utc=True)
        entity_df[_ROW] = query.index.to_numpy(np.int64)
        # Feast maps view aliases back to the source columns itself; keys keep their names.
        job = store.get_historical_features(
            entity_df=entity_df, features=refs, full_feature_names=True
        )
        answer = job.to_df()
        if not answer[_ROW].is_unique:
            raise FeatureStoreError(
                f"get_historical_features gave duplicate rows for view {view.name}"
            )
        answer = answer.set_index(_ROW)
    answer = answer.reindex(np.arange(len(distinct)))
    # Row of ``distinct`` for every impression (an integer-keyed merge, input order kept).
    where = (
        imp[[*keys, "ts"]]
        .merge(distinct.assign(**{_ROW: np.arange(len(distinct))}), on=[*keys, "ts"], how="left")[
            _ROW
        ]
        .to_numpy()
    )
    picked = answer[names].iloc[where]
    columns = {
        f.name: pa.array(picked[n].reset_index(drop=True), from_pandas=True)
        for f, n in zip(projection.features, names, strict=True)
    }
    return _rows(spec, params, columns, len(imp))


def _rows(spec, params, columns: dict[str, pa.Array], n: int) -> ViewRows:
    """:class:`ViewRows` from the joined feature columns: a row was found where its
    ``computed_at`` (the event time in seconds) is not null."""
    seconds = pc.cast(columns[COMPUTED_AT], pa.int64())
    event = pc.multiply(seconds, 1_000_000).cast(pa.timestamp("us", tz="UTC"))
    table = pa.table({**columns, EVENT_TS: event})
    rows = rows_from_table(spec, params, table)
    assert len(rows) == n
    return rows


def build_training_set(
    impressions: pd.DataFrame,
    store,  # a feast.FeatureStore
    cfg: SolarisConfig,
    *,
    fm_version: str,
) -> TierFeatures:
    """SOLARIS features of each impression as serving would have assembled them at its time.

    Args:
        impressions: ``user_id``, ``item_id`` (integers) and ``ts`` (epoch seconds, or a
            datetime column, read as UTC). Duplicates are allowed; other columns ignored.
        store: a ``feast.FeatureStore`` with the SOLARIS definitions applied.
        cfg: settings (TTLs, ``model.z_dim``, ``store.nbr_strategy``), the same as serving's.
        fm_version: the FM version the VM is trained for; rows of another version are misses.

    Returns:
        :class:`~solaris.serving.tiers.TierFeatures` with one row per impression, in the
        input order.
    """
    imp = _check_impressions(impressions)
    if len(imp) == 0:
        return empty_tiers(0, cfg.model.z_dim)
    service = store.get_feature_service(FEATURE_SERVICE)
    views = {
        projection.name: _view_as_of(store, projection, imp, cfg)
        for projection in service.feature_view_projections
    }
    return assemble_tiers(views, imp["ts"].to_numpy(), fm_version=fm_version, **tier_settings(cfg))
