"""The embeddings DAG: shard the selections, embed each shard, materialize it.

Task entry points: :func:`plan` (the shards of the selections that triggered the run),
:func:`embed` (one mapped task per shard, on the GPU pool when there is one: the FM of
``model.foundation`` → its last shared layer → the autoencoder → ``z`` with ``computed_at``
= the interval's end, then Feast's ``pair`` view, :func:`~solaris.pipeline.materialize.
materialize`: Redis, and the offline rows published once Redis has them; a retried shard
rewrites the same files) and :func:`publish` (the run's record, the completion markers and
the ``pair_embeddings`` event). Each shard carries its namespace and its run's generation.

A run never loses finished work: the plan reads every interval's ledger before it writes
anything (an interval without one fails the run, naming it, with every other interval
untouched), and writes its shards and codes into folders of its own generation
(:class:`~solaris.orchestration.layout.CycleLayout`); :func:`publish` points the interval's
marker at them only once every shard is in. Nothing is renamed, so the state may live in
object storage. A shard's Redis rows and offline batch file are replaced together when the
shard is written (the same keys and file names); offline files of shards the new plan no
longer has are removed at the swap.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from solaris.config import SolarisConfig
from solaris.files import atomic_write_json, remove_tree
from solaris.namespace import Namespace
from solaris.orchestration.handoff import Scope, Shard, results_in, span
from solaris.orchestration.layout import CycleLayout, Interval, shard_coverage, write_run_record
from solaris.orchestration.resources import (
    CycleInputError,
    PlanError,
    cycle_redis,
    feature_store,
    mapped_task_budget,
    read_parquet,
)
from solaris.orchestration.runs import (
    CANDIDATES,
    Params,
    combine_extras,
    mapped_results,
    task_runs,
    unit_run,
)

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from solaris.files import StatePath
    from solaris.store.partitions import Partitioning

__all__ = [
    "DAG_ID",
    "embed",
    "embed_and_materialize",
    "plan",
    "plan_shards",
    "publish",
    "summarize_embeddings",
    "swap_in_embeddings",
    "work_intervals",
]

DAG_ID = "solaris_embeddings"

log = logging.getLogger(__name__)

_CANDIDATE_COLUMNS = ["request_id", "user_id", "item_id", "ts", "label"]


def plan(params: Params, events: Any = None) -> list[dict[str, Any]]:
    """The shards of the selections that triggered the run: one mapped task each."""
    runs = list(task_runs(params, events, CANDIDATES))
    return [
        shard.to_json()
        for run in runs
        for shard in plan_shards(
            run.cfg,
            run.intervals,
            max_shards=mapped_task_budget(run.cfg, len(runs), "the embedding plan"),
        )
    ]


def embed(shard: dict[str, Any]) -> dict[str, Any]:
    """FM → autoencoder → ``pair`` view for one shard (a mapped task on the gpu pool)."""
    planned = Shard.from_json(shard)
    return embed_and_materialize(unit_run(planned).cfg, planned)


def publish(
    params: Params, shards: Sequence[dict[str, Any] | None], events: Any = None
) -> dict[str, Any]:
    """The run's record: the ``pair_embeddings`` asset event's extra."""
    results = mapped_results(shards)
    return combine_extras(
        [
            run.extra(
                summarize_embeddings(
                    run.cfg,
                    run.intervals,
                    results_in(run.scope, results),
                )
            )
            for run in task_runs(params, events, CANDIDATES)
        ]
    )


def plan_shards(
    cfg: SolarisConfig, intervals: Sequence[Interval], *, max_shards: int | None = None
) -> list[Shard]:
    """Split each interval's distinct selected pairs into shards of ``cycle.shard_rows``,
    or of more rows when the run's intervals would need more than ``max_shards`` (default
    ``cycle.max_mapped_tasks``) shards: one bound for every interval of the run, the
    smallest that fits (:func:`~solaris.store.partitions.pack_within`).

    Every interval's ledger is opened (its pairs' ids read and counted per partition) before
    anything is written: one that is missing or unreadable fails the run with
    :class:`~solaris.orchestration.resources.CycleInputError` naming that interval, and no
    interval's files are touched. The pairs are then read one ledger file at a time, so the
    plan's memory is a shard's and one partition's file, not the interval's. The shards go
    to a staging folder of a new generation (see the module docstring); an interval's
    finished codes stay where they are until :func:`publish` swaps the new ones in.

    Shards follow the partitions (``cycle.partitions``, :mod:`solaris.store.partitions`):
    the pairs are ordered by their user's partition and cut into shards of whole
    partitions (quiet ones together, so a small interval is one shard) or pieces of one
    busy partition, and the plan records which partitions each shard holds, so the
    enrichment of one partition reads only its shards.

    Returns the shards, one mapped task each.

    Raises:
        PlanError: more intervals with pairs than ``max_shards`` (a shard holds one
            interval's pairs); nothing is planned or removed.
    """
    import pyarrow as pa

    from solaris.data.schemas import write_table
    from solaris.store.partitions import PartitionError, Partitioning, pack_within

    layout = CycleLayout(Namespace.of(cfg))
    scope = Scope.of(cfg)
    partitioning = Partitioning(cfg.cycle.partitions)
    # Every interval's ledger is opened (its pairs counted per partition) before any write.
    ledgers = {i: _Ledger.open(layout, i, partitioning) for i in work_intervals(cfg, intervals)}
    limit = cfg.cycle.max_mapped_tasks if max_shards is None else max_shards
    try:
        # Pairs in partition order: a shard holds whole partitions, or a piece of one, so a
        # partition's readers open only the shards that hold it.
        plans = pack_within(
            [ledger.sizes for ledger in ledgers.values()],
            cfg.cycle.shard_rows,
            split=True,
            max_units=limit,
        )
    except PartitionError as exc:
        raise PlanError(
            f"the embedding plan of {len(ledgers)} intervals: {exc}, and a shard holds one "
            f"interval's pairs: raise cycle.max_mapped_tasks (now {cfg.cycle.max_mapped_tasks:,}) "
            "or let the scheduler hand fewer intervals to one run; nothing was planned"
        ) from None
    generation = uuid.uuid4().hex[:12]
    shards = []
    for (interval, ledger), chunks in zip(ledgers.items(), plans, strict=True):
        _remove_other_generations(layout, interval)  # earlier runs' unfinished work: never read
        for index, chunk in enumerate(chunks):
            rows = ledger.rows(chunk.start, chunk.stop).sort_values("ts", kind="stable")
            part = pa.Table.from_pandas(rows, preserve_index=False)  # a shard is in time order
            write_table(part, layout.shard(interval, index, generation), "candidates")
            shards.append(
                Shard(
                    scope,
                    interval,
                    (chunk.first, chunk.last),
                    index=index,
                    rows=chunk.stop - chunk.start,
                    generation=generation,
                )
            )
        plan = {
            "generation": generation,
            "shards": len(chunks),
            "partitions": partitioning.count,
            "coverage": [[c.first, c.last] for c in chunks],
            "rows": [c.stop - c.start for c in chunks],
        }
        atomic_write_json(layout.plan(interval, generation), plan)
    return shards


class _Ledger:
    """One interval's selection ledger as the plan reads it: its distinct pairs in partition
    order (stable within a partition), counted per partition when opened (ids only) and read
    a file at a time when cut into shards, so memory is a shard's and one file's, not the
    interval's.

    The ledger is one file (one partition, or written before partitions) or one file per
    partition. Files whose partitions interleave (written under another partition count)
    are read together, as one frame."""

    def __init__(
        self,
        interval: Interval,
        partitioning: Partitioning,
        files: Sequence[StatePath],
        sizes: np.ndarray,
        starts: np.ndarray | None,
    ) -> None:
        self.interval = interval
        self.sizes = sizes  # distinct pairs per partition
        self._partitioning = partitioning
        self._files = files
        self._starts = starts  # each file's first row in partition order (None: interleaved)
        self._cached: tuple[int, pd.DataFrame] | None = None

    @classmethod
    def open(cls, layout: CycleLayout, interval: Interval, partitioning: Partitioning) -> _Ledger:
        """Count the ledger's distinct pairs per partition; a missing or unreadable ledger
        raises :class:`CycleInputError` naming the interval."""
        import numpy as np

        if not layout.has_interval("selections", interval):
            raise CycleInputError(
                f"interval {interval.key}: no selection ledger at "
                f"{layout.selections(interval)} (run the candidates DAG for it first); "
                "nothing was planned or removed for any interval of this run"
            )
        files = layout.interval_files("selections", interval)[0]
        sizes = np.zeros(partitioning.count, np.int64)
        spans = []  # each file's (first, last) partition and distinct pairs
        for path in files:
            ids = _read_ledger(path, interval, ["user_id", "item_id"]).drop_duplicates()
            parts = partitioning.of(ids["user_id"].to_numpy(np.int64))
            sizes += np.bincount(parts, minlength=partitioning.count)
            spans.append((int(parts.min()), int(parts.max()), len(ids)) if len(ids) else None)
        held = [span for span in spans if span is not None]
        if any(a[1] >= b[0] for a, b in itertools.pairwise(held)):
            # Read together, the files' pairs are distinct across files too: count those.
            ledger = cls(interval, partitioning, files, sizes, None)
            ids = ledger._frame(-1)["user_id"].to_numpy(np.int64)
            ledger.sizes = np.bincount(partitioning.of(ids), minlength=partitioning.count)
            return ledger
        starts = np.cumsum([0] + [span[2] if span else 0 for span in spans])
        return cls(interval, partitioning, files, sizes, starts)

    def rows(self, start: int, stop: int) -> pd.DataFrame:
        """Rows ``[start, stop)`` of the partition-ordered distinct pairs."""
        import pandas as pd

        if self._starts is None:
            return self._frame(-1).iloc[start:stop]
        pieces = [
            self._frame(k).iloc[max(start - lo, 0) : stop - lo]
            for k, (lo, hi) in enumerate(zip(self._starts[:-1], self._starts[1:], strict=True))
            if lo < stop and hi > start
        ]
        return pd.concat(pieces, ignore_index=True) if len(pieces) != 1 else pieces[0]

    def _frame(self, k: int) -> pd.DataFrame:
        """File ``k``'s distinct pairs in partition order (every file's: ``k`` = -1); the
        last one read is kept (a busy partition's pieces are consecutive shards)."""
        import numpy as np
        import pandas as pd

        if self._cached is not None and self._cached[0] == k:
            return self._cached[1]
        files = self._files if k < 0 else [self._files[k]]
        frames = [_read_ledger(path, self.interval, _CANDIDATE_COLUMNS) for path in files]
        pairs = pd.concat(frames, ignore_index=True) if len(frames) != 1 else frames[0]
        pairs = pairs.drop_duplicates(["user_id", "item_id"], ignore_index=True)
        pairs = pairs.assign(label=pairs["label"].astype("Int8"))
        members = self._partitioning.split(pairs["user_id"].to_numpy(np.int64))
        pairs = pairs.iloc[np.concatenate(members)].reset_index(drop=True)
        self._cached = (k, pairs)
        return pairs


def _read_ledger(path: StatePath, interval: Interval, columns: Sequence[str]) -> pd.DataFrame:
    """Columns of one ledger file; an unreadable one raises :class:`CycleInputError`."""
    try:
        return read_parquet(path, columns)
    except CycleInputError as exc:
        raise CycleInputError(
            f"interval {interval.key}: {exc}; nothing was planned or removed for any interval "
            "of this run"
        ) from exc


def _remove_other_generations(
    layout: CycleLayout, interval: Interval, keep: str | None = None
) -> None:
    """Remove every generation of ``interval`` but ``keep`` (by default the published one):
    unfinished runs, a replaced generation, leftovers of a removal that was cut short."""
    keep = keep or layout.published_generation(interval)
    for generation in layout.generations(interval):
        if generation != keep:
            _remove_generation(layout, interval, generation)


def _remove_generation(layout: CycleLayout, interval: Interval, generation: str) -> None:
    """Remove one generation's shards and codes, its plan first: from then on no publish
    takes it, however far the removal gets."""
    layout.plan(interval, generation).unlink(missing_ok=True)
    remove_tree(layout.shards_dir(interval, generation))
    remove_tree(layout.embeddings_dir(interval, generation))


def work_intervals(cfg: SolarisConfig, intervals: Sequence[Interval]) -> list[Interval]:
    """``intervals`` and every earlier selection of the namespace still without codes: the
    work queue lives in the cycle's own state, so a lost asset event or a failed run is
    made good by the next embeddings run."""
    layout = CycleLayout(Namespace.of(cfg))
    pending = [
        i
        for i in layout.intervals("selections", ending_after=-1, ending_by=max(intervals).end)
        if not layout.embeddings_done(i).is_file()
    ]
    return sorted(set(intervals) | set(pending))


def swap_in_embeddings(cfg: SolarisConfig, interval: Interval, generation: str) -> int:
    """Make run ``generation``'s codes of ``interval`` the interval's codes; returns the
    number of shards. Idempotent: a retry finishes what an interrupted call left.

    Checks that every planned shard has its codes, then rewrites the interval's marker
    (one atomic write) to name ``generation``: readers, who take an interval's codes only
    through its marker, see the old generation's codes or the new one's, never a mix. The
    replaced generation (and any leftover one) is removed after, its plan first; a reader
    that took the old marker a moment before fails on a missing file, never reads part of
    a generation (it reads the files the marker counts), and its retry reads the new codes.
    Offline ``pair`` files of shards this generation does not have (an earlier plan cut
    more) are removed last.
    """
    from solaris.store.offline import offline_dir

    layout = CycleLayout(Namespace.of(cfg))
    plan = _staged_shards(layout, interval, generation)
    count = plan["shards"]
    offline = offline_dir(feature_store(cfg, cycle_redis(cfg)), "pair")  # before committing
    replaced = layout.published_codes(interval)
    if replaced is None or replaced.generation != generation:
        atomic_write_json(layout.embeddings_done(interval), plan)  # the marker: the plan
    _remove_other_generations(layout, interval, keep=generation)
    if replaced is not None and replaced.generation is None:  # codes from before generations
        legacy = (layout.root / "shards" / interval.key).glob("shard-*.parquet")
        for path in (*replaced.files, *legacy):
            path.unlink(missing_ok=True)
    for path in offline.glob(f"date=*/batch-{_batch_id(interval, '*')}.parquet"):
        index = path.name.removesuffix(".parquet").rsplit("-", 1)[-1]
        if not index.isdigit() or int(index) >= count:
            path.unlink(missing_ok=True)
    return count


def _batch_id(interval: Interval, shard: int | str) -> str:
    suffix = f"{shard:04d}" if isinstance(shard, int) else shard
    return f"{interval.key}-shard-{suffix}"


def embed_and_materialize(cfg: SolarisConfig, shard: Shard) -> dict[str, Any]:
    """Embed one shard into its run's staging folder and write its codes to the ``pair``
    view (online, then the offline rows published); returns the shard's result."""
    from solaris import adapters
    from solaris.data.schemas import read_table
    from solaris.models.device import resolve_device
    from solaris.pipeline.codes import load_autoencoder
    from solaris.pipeline.embed import embed_shard
    from solaris.pipeline.materialize import materialize, pair_rows

    began = time.perf_counter()
    layout = CycleLayout(Namespace.of(cfg))
    interval, index, generation = shard.interval, shard.index, shard.generation
    fm = adapters.foundation_model(cfg)
    autoencoder, version = load_autoencoder(layout.models_dir, fm)
    out = layout.embeddings(interval, index, generation)
    rows = embed_shard(
        layout.shard(interval, index, generation),
        out,
        fm=fm,
        autoencoder=autoencoder,
        computed_at=interval.end,
        fm_version=version,
        device=resolve_device(cfg.device),
    )
    embed_s = time.perf_counter() - began
    table = read_table(out, "pair_embeddings", z_dim=cfg.model.z_dim)
    store = feature_store(cfg, cycle_redis(cfg))
    written = materialize(
        store,
        "pair",
        pair_rows(table, z_dim=cfg.model.z_dim, source=str(out)),
        batch_id=_batch_id(interval, index),
    )
    log.info(
        "shard %d of %s: %d pairs embedded in %.2f s to %s; the pair view written in %.2f s",
        index,
        interval.key,
        rows,
        embed_s,
        out,
        written.online_seconds,
    )
    return shard.result(
        {
            "rows": rows,
            "embed_seconds": round(embed_s, 3),
            "online_seconds": round(written.online_seconds, 3),
            "computed_at": interval.end,
        }
    )


def _generation(
    layout: CycleLayout, intervals: Sequence[Interval], shards: Sequence[dict[str, Any]]
) -> str | None:
    """The generation of the run's plan: the one its shards carry (staged, or published by
    an earlier attempt of this publish), else (no pair to embed) the one staged for its
    intervals; None when nothing is staged (an earlier attempt swapped everything in)."""
    made = {Shard.of_result(s).generation for s in shards}
    staged = set().union(*(layout.staged_generations(i) for i in intervals))
    published = {layout.published_generation(i) for i in intervals} - {None}
    if len(made) == 1 and made <= staged | published:
        return made.pop()
    if not made and len(staged) <= 1:
        return staged.pop() if staged else None
    raise CycleInputError(
        f"intervals {[i.key for i in intervals]}: no single staged generation to publish "
        f"(shards of {sorted(made)}, staged {sorted(staged)}): rerun the embeddings DAG"
    )


def _staged_shards(layout: CycleLayout, interval: Interval, generation: str) -> dict[str, Any]:
    """``generation``'s plan of ``interval`` (``generation``, ``shards`` and, since
    partitions, ``partitions`` and ``coverage``), once every shard has its codes
    (:class:`~solaris.orchestration.resources.CycleInputError` otherwise)."""
    path = layout.plan(interval, generation)
    try:
        plan = json.loads(path.read_text())
        count = int(plan["shards"])
        partitions, coverage = shard_coverage(plan, count)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CycleInputError(
            f"interval {interval.key}: no plan of generation {generation} at {path} "
            f"(a later run replanned it?): {exc}"
        ) from exc
    rows = plan.get("rows")
    plan = {"generation": generation, "shards": count}
    if coverage is not None:
        plan |= {"partitions": partitions, "coverage": [list(c) for c in coverage], "rows": rows}
    missing = [k for k in range(count) if not layout.embeddings(interval, k, generation).is_file()]
    if missing:
        raise CycleInputError(
            f"interval {interval.key}: shards {missing} of generation {generation} have no "
            "codes; the interval keeps its earlier codes"
        )
    return plan


def summarize_embeddings(
    cfg: SolarisConfig, intervals: Sequence[Interval], shards: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """Swap each interval's new codes in (:func:`swap_in_embeddings`) and return the run's
    figures (its run record and the ``pair_embeddings`` asset's metadata)."""
    import numpy as np

    layout = CycleLayout(Namespace.of(cfg))
    shards = [s for s in shards if s]  # a skipped mapped task returns nothing
    planned = work_intervals(cfg, intervals)  # the same the plan embedded
    generation = _generation(layout, planned, shards)
    if generation is None:  # a retried publish: an earlier attempt swapped everything in
        missing = [i.key for i in planned if not layout.embeddings_done(i).is_file()]
        if missing:
            raise CycleInputError(
                f"intervals {missing}: no staged generation to publish and no codes: rerun "
                "the embeddings DAG"
            )
        intervals = planned
        for interval in intervals:  # what an interrupted removal left
            _remove_other_generations(layout, interval)
    else:
        # The intervals the plan staged (one whose ledger came later waits for the next
        # run), or that an earlier attempt swapped in already; every one is checked
        # complete before any is swapped in.
        intervals = [
            i
            for i in planned
            if generation in layout.staged_generations(i)
            or layout.published_generation(i) == generation
        ]
        for interval in intervals:
            _staged_shards(layout, interval, generation)
    rows = int(sum(s["rows"] for s in shards))
    embed_s = float(sum(s["embed_seconds"] for s in shards))
    latest = max(i.end for i in intervals)
    record = {
        **span(intervals),
        "shards": len(shards),
        "fm_passes": rows,
        "rows_written": {"pair": rows},
        "pairs_per_second": round(rows / embed_s, 1) if embed_s else None,
        "seconds": round(embed_s + float(np.sum([s["online_seconds"] for s in shards])), 3),
        "computed_at": latest,
    }
    if generation is not None:
        for interval in intervals:  # every shard is in: readers may take these codes now
            swap_in_embeddings(cfg, interval, generation)
    key = Interval(min(i.start for i in intervals), latest).key
    folders = tuple(f for i in intervals if (f := layout.codes_dir(i)) is not None)
    write_run_record(layout, DAG_ID, key, record, wrote=folders)
    return record
