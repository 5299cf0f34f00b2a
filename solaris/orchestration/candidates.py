"""The candidates DAG: verifier selection for one scheduling interval.

Task entry point: :func:`select_when_published`, the poke of the DAG's one sensor task,
which runs :func:`select` once :func:`previous_published` holds.

- :func:`previous_published`: the previous interval's embeddings and enrichment of this
  namespace are published (so intervals of a backfill run strictly in order), and, in a
  replay, the daily clustering due between the two intervals;
- :func:`select`: in a replay namespace, first serve the interval's requests from the
  traffic source through :class:`~solaris.serving.client.SolarisFeatures` (which logs them,
  as serving does in production, and measures what the VM got); then drain the interval's
  request log into its table, drain the miss stream, select the top share of each request
  by the verifier's score (by default the score serving logged: no forward pass), and write
  the selection ledger.

The ledgers of earlier intervals are the cache the selection skips, exactly like the
offline replay's in-memory cache: a pair selected in ``[start, end)`` is computed at ``end``
and usable through ``end + ttl``. So a backfill selects the same pairs as
:func:`solaris.evaluation.replay.replay`, whatever order the embedding runs finish in.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from solaris.config import SolarisConfig
from solaris.namespace import Namespace
from solaris.orchestration.enrichment import CLUSTERING_DAG_ID, ENRICHMENT_DAG_ID
from solaris.orchestration.handoff import SelectionGroup, span
from solaris.orchestration.layout import CycleLayout, Interval, write_run_record
from solaris.orchestration.resources import (
    CycleInputError,
    check_partition_count,
    cycle_redis,
    mapped_task_budget,
    parquet_rows,
    read_parquet,
    write_parquet,
)
from solaris.orchestration.runs import (
    CANDIDATES,
    REQUEST_LOG,
    Params,
    TaskRun,
    cron_times,
    emit,
    finish_run,
    mapped_results,
    task_run,
    unit_run,
)

if TYPE_CHECKING:
    import pandas as pd
    from feast import FeatureStore

    from solaris.connection import RedisTarget

__all__ = [
    "DAG_ID",
    "DrainedLog",
    "check_drained",
    "collect_request_log",
    "drain_interval_misses",
    "drain_request_log",
    "finish_interval",
    "ledger_cache",
    "prepare",
    "prepare_interval",
    "previous_published",
    "publish",
    "release_request_log",
    "select",
    "select_group",
    "select_interval",
    "select_partitions",
    "select_when_published",
    "serve_replay",
    "with_misses",
]

DAG_ID = "solaris_candidates"
PSEUDO_REQUEST_BASE = 1 << 48  # request ids of drained misses that are not in the log
_KEY = ["user_id", "item_id", "ts"]


# -- entry points -----------------------------------------------------------------------------


def previous_published(params: Params, start: object, end: object) -> bool:
    """True when the interval before the run's has its embeddings and enrichment published
    (or there is none): the sensor's poke."""
    run = task_run(params, start, end, grid=True)
    layout = run.layout
    first = run.intervals[0]
    # The previous interval whose candidates run finished: one that failed part-way is not
    # waited for (the next embeddings run embeds any selection left without codes).
    earlier = layout.recorded_intervals(DAG_ID, ending_by=first.start)
    if not earlier:
        return True
    previous = earlier[-1]
    if not layout.embeddings_done(previous).is_file():
        return False
    # Enrichment records itself per view as of the newest interval end it ran for.
    views = ("uagg", "iagg", "nbr")
    if not all(
        layout.run_record(ENRICHMENT_DAG_ID, f"{previous.end:011d}-{v}").is_file() for v in views
    ):
        return False
    if not run.cfg.replay:
        return True
    # A replay also waits for the daily clustering due between the two intervals, so that
    # its neighbour tier is built from the same codes as in an in-order run (the demo's).
    due = cron_times(run.cfg.cycle.clustering_cron, previous.end - 1, first.start)
    recorded = [layout.run_record(CLUSTERING_DAG_ID, f"{t:011d}-unn").is_file() for t in due]
    missing = [t for t, done in zip(due, recorded, strict=True) if not done]
    if missing and first.start - previous.end > _REPLAY_GAP_S:
        raise CycleInputError(_replay_gap(run.cfg.namespace, previous, first, missing))
    return not missing


# A replay advances interval by interval: a run this far after the previous recorded one
# waits for clustering runs nothing schedules (the scheduler's run of today's interval in a
# replay namespace, or a second replayed window with a gap before it).
_REPLAY_GAP_S = 2 * 86_400


def _replay_gap(namespace: str, previous: Interval, first: Interval, missing: list[int]) -> str:
    from solaris.times import iso_utc

    return (
        f"interval {first.key} of the replay namespace {namespace!r} comes "
        f"{(first.start - previous.end) / 86_400:.1f} days after its previous recorded "
        f"interval {previous.key}, and it would wait for {len(missing)} clustering runs "
        f"({CLUSTERING_DAG_ID}, {iso_utc(missing[0])} to {iso_utc(missing[-1])}) that nothing "
        "schedules: a replay goes interval by interval (scripts/airflow_replay.sh backfills "
        "both DAGs over its window). If this is the scheduler's run of a current interval, "
        "pause the replay namespace's DAGs or run it with replay: false; to replay a later "
        f"window, backfill {CLUSTERING_DAG_ID} over the gap too, or reset the namespace first"
    )


def select_when_published(params: Params, start: object, end: object, events: Any = None) -> Any:
    """The poke of the DAG's sensor task: False (nothing done) until
    :func:`previous_published` holds, then :func:`prepare`, and its units as the task's
    result (an Airflow ``PokeReturnValue``). When it selected the interval itself, it emits
    the ``request_log`` and ``candidates`` events through ``events`` (the task's asset-alias
    outlet) at once and ends the run there (:func:`~solaris.orchestration.runs.finish_run`)."""
    from airflow.sdk import PokeReturnValue

    if not previous_published(params, start, end):
        return False
    run = task_run(params, start, end, grid=True)
    units, records = prepare(run)
    if not units:
        _emit(run, records, events)
        finish_run(events)  # the mapped tasks and publish: skipped at once
    return PokeReturnValue(is_done=True, xcom_value=units)


def prepare(run: TaskRun) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The run's selection, or its plan: per interval, a replay's serving and the miss
    drain (:func:`prepare_interval`); then the partitions are grouped by their request
    streams' lengths. One group (a quiet interval, whatever ``cycle.partitions`` is), or a
    run of several intervals (each interval's selection skips what the previous one
    selected, so they go in order): everything is selected here. Otherwise the groups are
    returned, one mapped :func:`select_group` task each. Returns the units and the records
    of the intervals selected here."""
    units, records = [], []
    for interval in run.intervals:
        served, groups = prepare_interval(run.cfg, interval)
        if len(groups) <= 1 or len(run.intervals) > 1:
            every = range(run.cfg.cycle.partitions)
            selected = select_partitions(run.cfg, interval, every)
            records.append(finish_interval(run.cfg, interval, served, [selected]))
            continue
        units += [
            SelectionGroup(run.scope, interval, (first, last), served=served).to_json()
            for first, last in groups
        ]
    return units, records


def select_group(unit: Mapping[str, Any]) -> dict[str, Any]:
    """The selection of one group of partitions (a mapped task)."""
    group = SelectionGroup.from_json(unit)
    cfg = unit_run(group).cfg
    return group.result(select_partitions(cfg, group.interval, group.partition_range))


def publish(
    params: Params,
    start: object,
    end: object,
    results: Sequence[Mapping[str, Any] | None],
    events: Any = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """After the mapped :func:`select_group` tasks: each interval's run record from its
    groups' figures (:func:`finish_interval`), and the ``request_log`` and ``candidates``
    events emitted through ``events`` (the task's asset-alias outlet). Returns the two
    events' extras."""
    run = task_run(params, start, end, grid=True)
    done = mapped_results(results)
    records = []
    for interval in run.intervals:
        mine = [r for r in done if SelectionGroup.of_result(r).interval == interval]
        if not mine:
            raise CycleInputError(
                f"interval {interval.key}: no mapped selection finished for it (the sensor "
                "planned it): rerun the run's select_partitions tasks"
            )
        served = SelectionGroup.of_result(mine[0]).served
        records.append(finish_interval(run.cfg, interval, served, mine))
    return _emit(run, records, events)


def _emit(
    run: TaskRun, records: list[dict[str, Any]], events: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``request_log`` and ``candidates`` events of the run's interval records (each
    with its drain's figures under ``request_log``), through ``events``; their extras."""
    logs = [r.pop("request_log") for r in records]
    log_extra = run.extra(_combine(logs, ("requests", "rows", "late", "stale_dropped")))
    selection = run.extra(_combine(records, ("selected", "candidates", "requests")))
    emit(events, REQUEST_LOG, [log_extra])
    emit(events, CANDIDATES, [selection])
    return log_extra, selection


def select(params: Params, start: object, end: object) -> tuple[dict, dict]:
    """Selection for the run's interval(s) in this process, every partition in order;
    returns the extras of the ``request_log`` and ``candidates`` events."""
    run = task_run(params, start, end, grid=True)
    return _emit(run, [select_interval(run.cfg, interval) for interval in run.intervals], None)


def _combine(records: list[dict[str, Any]], summed: tuple[str, ...]) -> dict[str, Any]:
    """One record for one interval; for several, their bounds and summed counts."""
    if len(records) == 1:
        return records[0]
    return {
        **span([Interval.from_dict(r) for r in records]),
        **{k: sum(r.get(k) or 0 for r in records) for k in summed},
    }


# -- the work ---------------------------------------------------------------------------------


def serve_replay(
    cfg: SolarisConfig,
    store: FeatureStore,
    redis: str | RedisTarget,
    fm_version: str,
    interval: Interval,
) -> dict[str, Any]:
    """A replay's serving: each request of the traffic source in ``interval`` is fetched
    through ``SolarisFeatures`` at its own time and logged with its scores, as a serving
    process logs it. Returns what the VM got: coverage by tier of labelled impressions."""
    import numpy as np

    from solaris import adapters
    from solaris.evaluation.served_coverage import ServedCoverage
    from solaris.serving.client import SolarisFeatures
    from solaris.serving.tiers import TIERS

    requests = adapters.traffic_requests(cfg, interval.start, interval.end)
    requests = requests.reset_index(drop=True)
    scores = requests["score"].to_numpy(np.float32, na_value=np.nan)
    unscored = np.isnan(scores)
    if unscored.any():  # serving scores what the traffic did not log: the verifier's job
        verifier = adapters.verifier(cfg)
        scores[unscored] = verifier.score(requests[unscored])
        if not np.isfinite(scores).all():
            raise CycleInputError(
                f"requests.source gave {int(unscored.sum())} candidate rows in "
                f"[{interval.start}, {interval.end}) without a logged score, and "
                f"model.verifier ({cfg.model.verifier}) does not score them: log scores with "
                "the traffic or configure a verifier that computes them"
            )
    result = ServedCoverage()
    # This replays history: a fetch slowed by the replaying machine must count as what the
    # cache held, not as a miss, so the serving time bound is lifted.
    cfg = cfg.model_copy(update={"store": cfg.store.model_copy(update={"fetch_timeout_ms": 30e3})})
    with SolarisFeatures(cfg, redis=redis, fm_version=fm_version, store=store) as client:
        if len(requests):
            client.warm_up()
        for (request_id, user_id, ts), rows in requests.groupby(
            ["request_id", "user_id", "ts"], sort=True
        ):
            items = rows["item_id"].to_numpy()
            served = client.fetch(int(user_id), items, now=int(ts))
            result.count(served, rows["label"].notna().to_numpy())
            logged = scores[rows.index.to_numpy()]  # positions: the index was reset above
            client.log_request(int(request_id), int(user_id), items, logged, now=int(ts))
            if not client.flush(timeout_s=60.0):  # each request logged before the next
                raise CycleInputError("the replay's serving client could not flush its writes")
        stats = client.stats
    if stats.requests_dropped:  # a replay must log every request it serves
        raise CycleInputError(
            f"{stats.requests_dropped} request-log writes of the replay failed (Redis); "
            "nothing was selected for this interval: rerun it"
        )
    n = result.n_impressions
    return {
        "labelled": n,
        # No labelled impression, no coverage: the page leaves the interval out of the plot.
        "coverage": {
            **{tier: result.coverage(tier) for tier in TIERS},
            "any": result.any_tier_coverage,
        }
        if n
        else None,
        "pair_hits": result.tier_present_counts["pair"],
        "main_tier_share": {k: v / n for k, v in result.main_tier_counts.items()} if n else None,
        "fetch_failures": stats.failures,
        "log_writes_dropped": stats.requests_dropped + stats.misses_dropped,
    }


@dataclass(frozen=True)
class DrainedLog:
    """One partition's request log of an interval, stored in its ``request_log`` file (durable:
    written and fsynced) and still in its stream: :func:`release_request_log` records the
    drain and deletes the entries once what the stage made of them is stored too.

    Attributes:
        rows: the interval's requests of the partition (its file's rows).
        figures: the drain's figures (``requests``, ``rows``, ``late``, ``stale_dropped``,
            ``left_for_later``, ``unreadable``).
        stream: the stream the entries came from.
        ids: the entries to delete: the rows' and the stale and unreadable ones.
        partition: the partition.
    """

    rows: pd.DataFrame
    figures: dict[str, Any]
    stream: str
    ids: list[bytes]
    partition: int


def collect_request_log(
    cfg: SolarisConfig, redis: str | RedisTarget, interval: Interval, partition: int = 0
) -> DrainedLog:
    """Partition ``partition``'s request log of the interval, read from its stream
    (:meth:`~solaris.namespace.Namespace.request_stream_of`) and stored in its
    ``request_log`` file; no entry is deleted (:func:`release_request_log` does, once the
    stage's outputs are stored, so a retry that finds the file lost reads them again).

    Entries with ``ts`` before the interval's end are added to the file (merged with what an
    earlier attempt of this run stored, one row per ``(request_id, item_id)``). Entries from
    after the interval stay for the next run. Late entries (before the interval's start:
    logged late, or of an interval whose run was skipped) are kept in this interval's table
    with their own times while they are less than a TTL old, since a code computed at this
    interval's end can still serve their pairs; older ones are of another time and are
    deleted with the rest and counted (``stale_dropped``), never selected.
    """
    import pandas as pd
    import pyarrow as pa

    from solaris.connection import redis_client
    from solaris.data.schemas import read_table, request_log_frame, write_table
    from solaris.serving.request_log import read_request_log
    from solaris.store.partitions import Partitioning

    parts = Partitioning(cfg.cycle.partitions)
    namespace = Namespace.of(cfg)
    path = CycleLayout(namespace).request_log(interval, _part(parts, partition))
    stream = namespace.request_stream_of(partition, parts)
    client = redis_client(redis, redis_type=cfg.store.redis_type, timeout_s=10.0)
    try:
        batch = read_request_log(
            client, stream, before=interval.end, max_items=cfg.store.max_candidates
        )
    finally:
        client.close()
    rows = batch.rows
    ts = rows["ts"].to_numpy()
    stale = ts < interval.start - cfg.selection.ttl_seconds
    late = ~stale & (ts < interval.start)
    fresh = rows[~stale].assign(label=pd.array([pd.NA] * int((~stale).sum()), "Int8"))
    if path.is_file():  # an earlier attempt of this run stored these
        earlier = request_log_frame(read_table(path, "request_log"), str(path))
        # The stream's rows first: where an entry is read again, its near-line mark counts.
        fresh = pd.concat([fresh, earlier], ignore_index=True)
    fresh = fresh.drop_duplicates(["request_id", "item_id"], ignore_index=True)
    # Rows only an earlier attempt stored lost their near-line mark (the cycle may select
    # them; the attempt's near-line marks file says which it skipped).
    fresh["nearline"] = fresh["nearline"].astype("boolean").fillna(False).astype(bool)
    fresh = fresh.sort_values(["ts", "request_id"], kind="stable", ignore_index=True)
    columns = ["request_id", "user_id", "item_id", "ts", "label", "score"]
    write_table(pa.Table.from_pandas(fresh[columns], preserve_index=False), path, "request_log")
    figures = {
        **interval.as_dict(),
        "requests": int(fresh["request_id"].nunique()),
        "rows": len(fresh),
        "late": int(rows.loc[late, "request_id"].nunique()),
        "stale_dropped": int(rows.loc[stale, "request_id"].nunique()),
        "left_for_later": batch.later,
        "unreadable": len(batch.skipped),
    }
    return DrainedLog(fresh, figures, stream, list(batch.ids), partition)


def release_request_log(
    cfg: SolarisConfig, redis: str | RedisTarget, interval: Interval, drained: DrainedLog
) -> None:
    """Record the drain (the rows its file holds: :meth:`CycleLayout.drained`), then delete
    its entries from the stream: from here on the file is their only copy, and a retry that
    finds it lost or short stops with :func:`check_drained` instead of selecting without them.
    """
    from solaris.connection import redis_client
    from solaris.files import atomic_write_json
    from solaris.serving.request_log import delete_entries

    layout = CycleLayout(Namespace.of(cfg))
    record = {"rows": len(drained.rows), "requests": drained.figures["requests"]}
    atomic_write_json(layout.drained(interval, drained.partition), record)
    client = redis_client(redis, redis_type=cfg.store.redis_type, timeout_s=10.0)
    try:
        delete_entries(client, drained.stream, drained.ids)
    finally:
        client.close()


def drain_request_log(
    cfg: SolarisConfig, redis: str | RedisTarget, interval: Interval, partition: int = 0
) -> tuple[pd.DataFrame, dict]:
    """:func:`collect_request_log` then :func:`release_request_log` at once: the interval's
    requests of the partition, stored in its file, recorded and deleted from the stream.
    Returns the rows and the drain's figures."""
    drained = collect_request_log(cfg, redis, interval, partition)
    release_request_log(cfg, redis, interval, drained)
    return drained.rows, drained.figures


def check_drained(
    layout: CycleLayout, interval: Interval, count: int, partitions: Iterable[int]
) -> None:
    """Every request-log file an earlier attempt recorded as drained (its stream entries
    deleted) is there and holds at least the rows it recorded: a retry that went on without
    it would select the partition's requests short, without a word. Checked before anything
    of the interval is drained or written (a record and a file footer a partition).

    Raises:
        CycleInputError: naming the file, the rows recorded and the record."""
    import json

    for partition in partitions:
        record = layout.drained(interval, partition)
        if not record.is_file():
            continue  # not drained yet: its entries are still in the stream
        try:
            rows = int(json.loads(record.read_text())["rows"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CycleInputError(
                f"interval {interval.key}: the drain record {record} of partition "
                f"{partition} is unreadable ({exc}); nothing of this interval was written"
            ) from exc
        path = layout.request_log(interval, None if count == 1 else partition)
        held = parquet_rows(path) if path.is_file() else None
        if held is None or held < rows:
            what = "is missing" if held is None else f"holds {held} rows"
            raise CycleInputError(
                f"interval {interval.key}: the request-log file {path} of partition "
                f"{partition} {what}, but an earlier attempt drained {rows} rows into it and "
                f"deleted them from the stream ({record}); selecting now would leave them "
                "out. Restore the file, or delete the record to go on without those requests; "
                "nothing of this interval was drained or written"
            )


def drain_interval_misses(
    cfg: SolarisConfig, redis: str | RedisTarget, interval: Interval
) -> pd.DataFrame:
    """Drain the namespace's miss stream for ``interval``.

    Misses from after the interval go back for the next run; misses older than a TTL
    before it are of another time (no code computed now could have served them) and are
    dropped. The drain deletes the entries as it reads them (the miss stream is best
    effort: a run killed between the drain and the file loses them); the drained rows are
    added to ``misses/<key>.parquet`` before anything else happens with them, and a retried
    run starts from that file.
    """
    import pandas as pd

    from solaris.connection import redis_client
    from solaris.serving.misses import append_misses, drain_misses

    namespace = Namespace.of(cfg)
    path = CycleLayout(namespace).misses(interval)
    client = redis_client(redis, redis_type=cfg.store.redis_type, timeout_s=10.0)
    try:
        misses = drain_misses(client, namespace.miss_stream, max_items=cfg.store.max_candidates)
        if path.is_file():  # an earlier attempt of this run drained these
            earlier = read_parquet(path)
            misses = pd.concat([earlier, misses], ignore_index=True).drop_duplicates(
                _KEY, ignore_index=True
            )
        if len(misses):
            write_parquet(misses, path)
        later = misses[misses["ts"].to_numpy() >= interval.end]
        for (user_id, ts), rows in later.groupby(["user_id", "ts"], sort=True):
            append_misses(
                client,
                namespace.miss_stream,
                cfg.store.miss_stream_maxlen,
                int(user_id),
                rows["item_id"].to_numpy(),
                int(ts),
            )
    finally:
        client.close()
    return _interval_misses(cfg, interval, misses)


def _interval_misses(
    cfg: SolarisConfig, interval: Interval, misses: pd.DataFrame, partition: int | None = None
) -> pd.DataFrame:
    """The drained misses a code computed at the interval's end can serve (stamped within a
    TTL before its end), of partition ``partition``'s users when given."""

    from solaris.store.partitions import Partitioning

    oldest = interval.start - cfg.selection.ttl_seconds
    ts = misses["ts"].to_numpy()
    keep = (ts >= oldest) & (ts < interval.end)
    if partition is not None:
        keep &= Partitioning(cfg.cycle.partitions).holds(misses["user_id"].to_numpy(), partition)
    return misses[keep].reset_index(drop=True)


def with_misses(requests: pd.DataFrame, misses: pd.DataFrame, partition: int = 0) -> pd.DataFrame:
    """The interval's logged candidates plus the missed pairs the log does not hold.

    Each (user, ts) group of new misses becomes one pseudo-request (unlabelled, no logged
    score), so the per-request selection budget applies to it as to any request; their ids
    start at ``PSEUDO_REQUEST_BASE + partition · 2^32``, so partitions never share one.
    """
    import numpy as np
    import pandas as pd

    if len(misses) == 0:
        return requests
    fresh = misses.drop_duplicates(_KEY).merge(
        requests[_KEY].drop_duplicates(), on=_KEY, how="left", indicator=True
    )
    fresh = fresh[fresh["_merge"] == "left_only"].drop(columns="_merge")
    if len(fresh) == 0:
        return requests
    group = fresh.groupby(["user_id", "ts"], sort=True).ngroup().to_numpy(np.int64)
    pseudo = fresh.assign(
        request_id=PSEUDO_REQUEST_BASE + (partition << 32) + group,
        label=pd.array([pd.NA] * len(fresh), "Int8"),
        score=np.float32(np.nan),
        nearline=False,
    )[list(requests.columns)]
    combined = pd.concat([requests, pseudo], ignore_index=True)
    return combined.sort_values("ts", kind="stable", ignore_index=True)


def ledger_cache(
    layout: CycleLayout,
    interval: Interval,
    ttl_s: int,
    partition: int | None = None,
    partitions: int = 1,
) -> pd.DataFrame:
    """Pairs selected by earlier intervals that are still fresh at some point of this one:
    a code computed at ``end`` is fresh through ``end + ttl_s`` inclusive, so every interval
    with ``end >= interval.start - ttl_s`` counts; the pairs serving selected near-line in
    those intervals (:meth:`~solaris.orchestration.layout.CycleLayout.nearline`) too. Only
    partition ``partition``'s pairs (of ``partitions``) when given: its own ledger files, or
    its rows of a whole one."""
    import numpy as np
    import pandas as pd

    from solaris.store.partitions import Partitioning

    frames = []
    earlier = _earlier_ledgers(layout, interval, ttl_s)
    for kind, i in earlier:
        files, mixed = layout.interval_files(kind, i, partition)
        for path in files:
            frame = read_parquet(path, ["user_id", "item_id", "expires_at"])
            if mixed:
                frame = frame[
                    Partitioning(partitions).holds(frame["user_id"].to_numpy(), partition)
                ]
            frames.append(frame)
    if not frames:
        return pd.DataFrame(
            {c: np.zeros(0, np.int64) for c in ("user_id", "item_id", "expires_at")}
        )
    return pd.concat(frames, ignore_index=True)


# The ledgers whose pairs the selection skips while fresh: the cycle's own, and near-line's.
_LEDGERS = ("selections", "nearline")


def _earlier_ledgers(
    layout: CycleLayout, interval: Interval, ttl_s: int
) -> list[tuple[str, Interval]]:
    """``(kind, interval)`` of the ledgers :func:`ledger_cache` reads for ``interval``."""
    return [
        (kind, i)
        for kind in _LEDGERS
        for i in layout.intervals(
            kind, ending_after=interval.start - ttl_s - 1, ending_by=interval.start
        )
    ]


def _check_ledgers(
    layout: CycleLayout, interval: Interval, ttl_s: int, partitions: Iterable[int]
) -> None:
    """Every selection ledger the selection of ``partitions`` will read is there: an
    earlier interval split by partition has one file per partition (an empty one when it
    selected nothing), so a missing one was lost, and without it the partition's fresh
    pairs would be taken for stale and selected again, without a word. Checked before
    anything of the interval is drained or written (file existence only).

    Raises:
        CycleInputError: naming the missing file and the interval."""
    for kind, earlier in _earlier_ledgers(layout, interval, ttl_s):
        if kind != "selections":
            continue  # near-line marks exist only where serving selected
        # One listing of the interval's ledgers (not a look-up per partition: on an object
        # store each would be a request).
        files, _ = layout.interval_files(kind, earlier)
        if layout.selections(earlier) in files:
            continue  # one file for the whole interval
        there = {path.name for path in files}
        for partition in partitions:
            path = layout.selections(earlier, partition)
            if path.name not in there:
                raise CycleInputError(
                    f"interval {interval.key}: the selection ledger of partition {partition} "
                    f"for the earlier interval {earlier.key} is missing ({path}) while its "
                    "other partitions' are there; without it that partition's fresh pairs "
                    "would be selected again. Restore the file (or rerun that interval's "
                    "candidates run); nothing of this interval was drained or written"
                )


def _check_readable(
    layout: CycleLayout, interval: Interval, ttl_s: int, parts: Any, partitions: Iterable[int]
) -> None:
    """Every file the selection of ``partitions`` will read has a readable footer: the
    earlier ledgers its cache reads and what an earlier attempt of this interval stored (its
    request logs and near-line marks). Checked before anything is drained or written, so a
    torn file stops the task naming it (:func:`parquet_rows`), not after some partitions'
    streams were drained and their ledgers written.

    Raises:
        CycleInputError: naming the unreadable file."""
    kinds = [*_earlier_ledgers(layout, interval, ttl_s)]
    kinds += [("request_log", interval), ("nearline", interval)]
    paths = {  # a file of a whole interval is every partition's: read once
        path
        for partition in partitions
        for kind, earlier in kinds
        for path in layout.interval_files(kind, earlier, _part(parts, partition))[0]
    }
    for path in sorted(paths, key=str):
        parquet_rows(path)


def code_age(layout: CycleLayout, interval: Interval, ttl_s: int) -> int | None:
    """How old the newest pair codes had grown by the end of ``interval`` (one cadence when
    the cycle keeps up), or None when no codes could have served it.

    Only codes still within their TTL when the interval began count: an old interval's
    codes (a run over a 1998 window in a live namespace) are not the live run's codes.
    """
    embedded = layout.embedded_intervals(
        ending_after=interval.start - ttl_s, ending_by=interval.start
    )
    return interval.end - embedded[-1].end if embedded else None


def _part(parts: Any, partition: int) -> int | None:
    """The file of partition ``partition`` (None: one file for the interval, one partition)."""
    return None if parts.count == 1 else partition


def prepare_interval(cfg: SolarisConfig, interval: Interval) -> tuple[dict, list[list[int]]]:
    """What comes before an interval's per-partition selection, in one task: a replay's
    serving of the interval (it logs the requests into the partitions' streams), the miss
    stream's drain, and the groups of consecutive partitions whose request streams hold
    at most ``cycle.select_requests`` requests (a busier partition is a group of its own).
    Returns the serving figures and the groups."""
    import numpy as np

    from solaris.connection import redis_client
    from solaris.pipeline.codes import read_manifest
    from solaris.store.partitions import Partitioning, pack

    began = time.perf_counter()
    namespace = Namespace.of(cfg)
    redis = cycle_redis(cfg)
    # Before any stream is read: serving appends by the namespace's recorded count.
    check_partition_count(cfg, f"interval {interval.key}: the selection")
    served: dict[str, Any] = {"began": time.time()}
    if cfg.replay:
        from solaris.orchestration.resources import feature_store

        version = read_manifest(CycleLayout(namespace).models_dir).fm_version
        served |= serve_replay(cfg, feature_store(cfg, redis), redis, version, interval)
    drain_interval_misses(cfg, redis, interval)  # kept in misses/<key>.parquet
    parts = Partitioning(cfg.cycle.partitions)
    client = redis_client(redis, redis_type=cfg.store.redis_type, timeout_s=10.0)
    try:
        pipe = client.pipeline(transaction=False)
        for stream in namespace.request_streams(parts):
            pipe.xlen(stream)
        sizes = np.array(pipe.execute(), dtype=np.int64)
    finally:
        client.close()
    budget = mapped_task_budget(cfg, 1, f"interval {interval.key}: the selection")
    units = pack(np.maximum(sizes, 1), cfg.cycle.select_requests, split=False, max_units=budget)
    served["prepare_seconds"] = time.perf_counter() - began
    return served, [[u.first, u.last] for u in units]


def select_partitions(
    cfg: SolarisConfig, interval: Interval, partitions: Iterable[int]
) -> dict[str, Any]:
    """Partition by partition (memory: one partition's requests and ledgers): drain its
    request stream into its file, add its users' drained misses, score with the verifier,
    select the top share of each request against its own ledger cache, write its ledger,
    and only then delete the drained entries from the stream (a retry of an attempt that
    died before reads them again, whatever became of its files). The files every partition
    will read are checked first, so a missing or unreadable one stops the task before it
    drains or writes anything. Returns the summed figures :func:`finish_interval` records."""
    import numpy as np
    import pandas as pd

    from solaris import adapters
    from solaris.pipeline.select import select_candidates
    from solaris.store.partitions import Partitioning

    began = time.perf_counter()
    layout = CycleLayout(Namespace.of(cfg))
    parts = Partitioning(cfg.cycle.partitions)
    ttl_s = cfg.selection.ttl_seconds
    redis = cycle_redis(cfg)
    check_partition_count(cfg, f"interval {interval.key}: the selection")
    verifier = adapters.verifier(cfg)
    path = layout.misses(interval)
    drained_misses = read_parquet(path) if path.is_file() else pd.DataFrame(columns=_KEY)
    figures: dict[str, Any] = dict.fromkeys(_DRAIN_FIGURES + _SELECT_FIGURES, 0)
    partitions = list(partitions)
    if parts.count > 1:  # before any partition's stream is drained
        _check_ledgers(layout, interval, ttl_s, partitions)
    check_drained(layout, interval, parts.count, partitions)
    _check_readable(layout, interval, ttl_s, parts, partitions)
    for partition in partitions:
        drain = collect_request_log(cfg, redis, interval, partition)
        logged, drained = drain.rows, drain.figures
        misses = _interval_misses(cfg, interval, drained_misses, partition)
        marks = layout.nearline(interval, _part(parts, partition))
        earlier = read_parquet(marks) if marks.is_file() else None  # a retried attempt's
        candidates = with_misses(logged, misses, partition)
        batch, nearline = _without_nearline(candidates, ttl_s, earlier)
        if len(nearline):
            write_parquet(nearline, marks)
        scores = verifier.score(batch) if len(batch) else np.zeros(0, np.float32)
        cache = ledger_cache(layout, interval, ttl_s, partition, parts.count)
        cache = pd.concat([cache, nearline[list(cache.columns)]], ignore_index=True)
        selected = select_candidates(
            batch.drop(columns="score"), scores, share=cfg.selection.share, cache=cache
        )
        # What serving selected near-line but no embedder wrote (its embed-stream entry was
        # trimmed, or is not read yet) is selected here, not left "fresh" for a whole TTL.
        back = _taken_back(cfg, redis, interval, nearline)
        if len(back):
            taken = candidates.merge(back, on=["request_id", "item_id"])[list(selected.columns)]
            selected = pd.concat([selected, taken], ignore_index=True)
            selected = selected.sort_values("ts", kind="stable", ignore_index=True)
        ledger = selected.assign(
            computed_at=np.int64(interval.end), expires_at=np.int64(interval.end + ttl_s)
        )
        write_parquet(ledger, layout.selections(interval, _part(parts, partition)))
        # Only now do its entries leave the stream: a retry before this reads them again.
        release_request_log(cfg, redis, interval, drain)
        for key in _DRAIN_FIGURES:
            figures[key] += drained[key]
        figures["candidates"] += len(batch)
        figures["misses_drained"] += len(misses)
        figures["miss_candidates_added"] += len(batch) - len(logged)
        figures["selected"] += len(ledger)
        figures["nearline_selected"] += len(nearline)
        figures["nearline_taken_back"] += len(back)
        figures["fm_passes"] += int(ledger[["user_id", "item_id"]].drop_duplicates().shape[0])
    return {
        **interval.as_dict(),
        **figures,
        "verifier": verifier.version,
        "seconds": round(time.perf_counter() - began, 3),
    }


_DRAIN_FIGURES = ("requests", "rows", "late", "stale_dropped", "left_for_later", "unreadable")
_SELECT_FIGURES = (
    "candidates",
    "nearline_selected",
    "nearline_taken_back",
    "misses_drained",
    "miss_candidates_added",
    "selected",
    "fm_passes",
)


def _taken_back(
    cfg: SolarisConfig, redis: str | RedisTarget, interval: Interval, nearline: pd.DataFrame
) -> pd.DataFrame:
    """``request_id, item_id`` of the near-line pairs that have no code of the current FM
    version written at or after their request and fresh at the interval's end
    (:func:`~solaris.serving.nearline.written_codes`): the embedder never wrote them (their
    embed-stream entry was trimmed at ``nearline.stream_maxlen``, or it is behind), so the
    cycle embeds them itself. One pipelined ``HMGET`` per user."""
    import numpy as np

    from solaris.connection import redis_client
    from solaris.manifest import current_fm_version
    from solaris.serving.nearline import written_codes
    from solaris.store.contract import PAIR

    if not len(nearline):
        return nearline[["request_id", "item_id"]]
    client = redis_client(redis, redis_type=cfg.store.redis_type, timeout_s=10.0)
    try:
        written = written_codes(
            client,
            Namespace.of(cfg).project,
            PAIR.params(cfg),
            current_fm_version(cfg),
            nearline["user_id"].to_numpy(np.int64),
            nearline["item_id"].to_numpy(np.int64),
            interval.end,
            nearline["ts"].to_numpy(np.int64),
        )
    finally:
        client.close()
    return nearline.loc[~written, ["request_id", "item_id"]].reset_index(drop=True)


def _without_nearline(
    batch: pd.DataFrame, ttl_s: int, earlier: pd.DataFrame | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The interval's candidates without the requests serving selected for near-line (their
    budget is spent: the cycle selects nothing more for them), and the pairs it selected
    (``request_id, user_id, item_id, ts, computed_at, expires_at``: fresh from the request
    on, as the embedder writes them seconds later), which the selection skips like cached
    ones. ``earlier``: what an earlier attempt of the run recorded (its drain deleted the
    entries, so their rows come back from the request-log file without their marks)."""
    import numpy as np
    import pandas as pd

    marked = batch.pop("nearline").to_numpy(bool) if "nearline" in batch else None
    if marked is None:
        marked = np.zeros(len(batch), bool)
    if earlier is not None and len(earlier):
        known = pd.MultiIndex.from_frame(earlier[["request_id", "item_id"]])
        marked = marked | pd.MultiIndex.from_frame(batch[["request_id", "item_id"]]).isin(known)
    taken = batch["request_id"].isin(batch.loc[marked, "request_id"]).to_numpy()
    rows = batch.loc[marked, ["request_id", "user_id", "item_id", "ts"]]
    ts = rows["ts"].to_numpy(np.int64)
    nearline = rows.assign(computed_at=ts, expires_at=ts + np.int64(ttl_s))
    if earlier is not None and len(earlier):
        nearline = pd.concat([earlier[list(nearline.columns)], nearline], ignore_index=True)
        nearline = nearline.drop_duplicates(["request_id", "item_id"], ignore_index=True)
    return batch[~taken].reset_index(drop=True), nearline.reset_index(drop=True)


def finish_interval(
    cfg: SolarisConfig,
    interval: Interval,
    served: Mapping[str, Any],
    results: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """The interval's run record from the serving figures and its partitions' selection
    figures (the next runs and the SOLARIS page read it). Returns it, with the request-log
    drain's figures under ``request_log``."""
    from solaris.serving.metrics import read_window

    namespace = Namespace.of(cfg)
    layout = CycleLayout(namespace)
    ttl_s = cfg.selection.ttl_seconds
    summed = {k: sum(int(r[k]) for r in results) for k in _DRAIN_FIGURES + _SELECT_FIGURES}
    drained = {**interval.as_dict(), **{k: summed[k] for k in _DRAIN_FIGURES}}
    serving = {k: v for k, v in served.items() if k not in ("began", "prepare_seconds")}
    record: dict[str, Any] = {
        **interval.as_dict(),
        "namespace": namespace.name,
        "replay": cfg.replay,
        **serving,
        "requests": summed["requests"],
        "freshness_s": code_age(layout, interval, ttl_s),
        **{k: summed[k] for k in _SELECT_FIGURES},
        "verifier": results[0]["verifier"] if results else None,
        "tasks": len(results),
        "serving": read_window(
            cycle_redis(cfg),
            namespace,
            interval.start,
            interval.end,
            redis_type=cfg.store.redis_type,
        ),
        "nearline": _nearline_now(cfg, namespace),
        "seconds": round(
            float(served.get("prepare_seconds", 0.0)) + sum(float(r["seconds"]) for r in results),
            3,
        ),
    }
    wrote = layout.interval_files("selections", interval)[0]  # one file, or a partition's each
    write_run_record(layout, DAG_ID, interval.key, {**record, "request_log": drained}, wrote=wrote)
    return {**record, "request_log": drained}


def _nearline_now(cfg: SolarisConfig, namespace: Namespace) -> dict[str, Any] | None:
    """The near-line embedders' figures as this run finishes (None: none published
    recently), from their status hash (:mod:`solaris.orchestration.nearline`)."""
    from solaris.connection import redis_client
    from solaris.orchestration.nearline import read_status, summarize_status

    client = redis_client(cycle_redis(cfg), redis_type=cfg.store.redis_type, timeout_s=10.0)
    try:
        return summarize_status(read_status(client, namespace), time.time())
    finally:
        client.close()


def select_interval(cfg: SolarisConfig, interval: Interval) -> dict[str, Any]:
    """One interval of the candidates DAG in this process (see the module docstring):
    :func:`prepare_interval`, every partition's :func:`select_partitions`, and the record.
    Returns the run's figures, with the request-log drain's under ``request_log``."""
    served, _ = prepare_interval(cfg, interval)
    every = range(cfg.cycle.partitions)
    return finish_interval(cfg, interval, served, [select_partitions(cfg, interval, every)])
