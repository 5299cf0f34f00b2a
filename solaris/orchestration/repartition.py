"""Changing a namespace's partition count: the re-split of what is in flight.

The partition count (``cycle.partitions``) is one recorded fact of a namespace
(:func:`~solaris.store.partitions.record_partition_count`): its request streams, its
ledgers and its per-partition state are split by it, and every process refuses another.
:func:`repartition` (``solaris namespace repartition NAME --partitions N``) changes it,
re-splitting by ``Partitioning(N)`` of each row's user everything split by the old count:

- **the request streams** (:meth:`~solaris.namespace.Namespace.request_streams`): every
  entry moves to its user's new partition's stream with its fields unchanged (the
  drain's de-duplication key, ``(rid, item)``, with them), added there before it is
  deleted from the old stream; an entry already in its new stream stays (a stream of the
  old count and one of the new can have the same name); an entry whose user cannot be read
  goes to partition 0's stream, whose drain deletes and counts it, as it would have (the
  miss stream, the embed stream with its consumer group and the metrics stream are one a
  namespace, whatever the count: untouched);
- **the interval files** (:class:`~solaris.orchestration.layout.CycleLayout`): the
  request-log files, the selection ledgers and the near-line ledgers of every interval,
  and the drain records (``drained/<interval>/<p>.json``, rewritten from the new request-log
  files), so the next selection skips exactly the pairs still fresh and drains every
  request once;
- **the kept neighbour lists** (``neighbour_lists/<built_at>/<p>.parquet``, by user);
- **derived state is removed**, since each is rebuilt when absent: the carried windows
  (``window_state``, ``window_codes``: a partition without a state rebuilds it from the
  window's codes, as it does when the state's partition count differs) and the per-interval
  files an enrichment run writes and reads itself (``iagg_partials``, ``user_embeddings``,
  ``fill_codes``: the next run writes its own; a rerun of only the last run's later tasks
  names the file and the task to rerun). The codes (``pair_embeddings``) record the count
  their shards were split by, and are read whole under another.

**Nothing lost, nothing twice, resumable.** Before anything is written the command checks
what it will read (every file opens, every drain record's file holds its rows, every
stream key is a stream) and records its target in the namespace's
:attr:`~solaris.namespace.Namespace.repartition_key` (``{"from": P, "to": N}``); from then
on every process that checks the count is refused. Each interval's new files are written
under staging names no reader takes (``_repartition-<name>``), then published over the
final names, and only then are the old files removed: at every point the files present
hold every row at least once, so a rerun after a crash reads them all, removes the copies
(by each kind's key), and finishes the same re-split. The recorded count changes last, and
the in-progress key is deleted after it.

**What must be stopped first:** serving processes, near-line embedders and the cycle's
DAGs of the namespace. A process checks the count once, when it starts, so one started
before the re-split would go on writing by the old count. The command moves stream entries
until a pass finds none left to move, and refuses to finish while entries keep arriving in
the old streams (a serving process still logging).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from solaris.namespace import Namespace
from solaris.orchestration.layout import CycleLayout, Interval
from solaris.orchestration.resources import cycle_redis
from solaris.store.partitions import PartitionError, Partitioning

if TYPE_CHECKING:
    import pyarrow as pa

    from solaris.config import SolarisConfig
    from solaris.connection import RedisTarget, RedisType
    from solaris.files import StatePath

__all__ = [
    "DERIVED_KINDS",
    "INTERVAL_KINDS",
    "Repartition",
    "RepartitionError",
    "RepartitionReport",
    "begin",
    "finish",
    "move_streams",
    "remove_derived",
    "repartition",
    "resplit_intervals",
    "resplit_neighbour_lists",
]

log = logging.getLogger(__name__)


class RepartitionError(PartitionError):
    """A re-split refused before anything was written (a namespace that records no count,
    the count it records, another re-split under way, a file or stream it cannot read), or
    one that cannot finish (entries keep arriving in the old streams); the message says
    what to do."""


@dataclass(frozen=True)
class _Kind:
    """How the files of one kind are re-split: the columns that identify a row (copies
    left by an interrupted re-split are removed by them), the order rows are written in,
    and whether a partition without rows gets an empty file (a reader takes a missing one
    of a split interval for a lost one) or none."""

    key: tuple[str, ...]
    order: tuple[str, ...]
    every_partition: bool


_PAIR_KEY = ("request_id", "item_id")
# The per-interval kinds, by CycleLayout's method of the same name.
_INTERVAL_KINDS = {
    "request_log": _Kind(_PAIR_KEY, ("ts",), every_partition=True),
    "selections": _Kind(_PAIR_KEY, ("ts",), every_partition=True),
    "nearline": _Kind(_PAIR_KEY, ("ts",), every_partition=False),  # only where serving selected
}
INTERVAL_KINDS = tuple(_INTERVAL_KINDS)
"""The per-interval files re-split by user (the drain records with the request logs)."""
_NEIGHBOUR_LISTS = _Kind(("user_id",), (), every_partition=False)  # absent: queried again


def _derived(layout: CycleLayout) -> dict[str, StatePath]:
    """The folders of the per-partition state that is rebuilt when absent, by kind (the
    layout's own paths, so their names have one home)."""
    return {
        "window_state": layout.window_state(0, 0).parent.parent,
        "window_codes": layout.window_codes(0, 0).parent.parent,
        "iagg_partials": layout.item_partials(0, 0).parent.parent,
        "user_embeddings": layout.user_embeddings(0, 0).parent.parent,
        "fill_codes": layout.fill_codes(0, 0).parent.parent,
    }


DERIVED_KINDS = ("window_state", "window_codes", "iagg_partials", "user_embeddings", "fill_codes")
"""The per-partition state removed (rebuilt when absent)."""

_STAGING = "_repartition-"  # a prefix no reader of the layout takes ([0-9]*, <interval>)
_PAGE = 1_000  # stream entries per XRANGE page
_PASSES = 5  # passes over the old streams before entries still arriving are an error
_LAST_END = 2**62  # the listing's upper bound: every interval


@dataclass(frozen=True)
class Repartition:
    """One re-split under way: the namespace, its Redis, the old and the new partitioning,
    and whether it resumes one an earlier run of the command began."""

    namespace: Namespace
    redis: RedisTarget
    redis_type: RedisType
    old: Partitioning
    new: Partitioning
    resumed: bool

    @property
    def layout(self) -> CycleLayout:
        return CycleLayout(self.namespace)

    def client(self) -> Any:
        from solaris.connection import redis_client

        return redis_client(self.redis, redis_type=self.redis_type, timeout_s=30.0)


@dataclass
class RepartitionReport:
    """What :func:`repartition` did."""

    namespace: str
    old: int
    new: int
    resumed: bool
    moved: int = 0
    files: dict[str, int] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """One paragraph for the command's output."""
        files = ", ".join(f"{kind} {n:,}" for kind, n in self.files.items()) or "none"
        removed = ", ".join(self.removed) or "none"
        again = " (resumed)" if self.resumed else ""
        return (
            f"namespace {self.namespace!r} re-split from {self.old} to {self.new} "
            f"partitions{again}: {self.moved:,} request-log entries moved; files written: "
            f"{files}; removed, rebuilt when needed: {removed}. Start serving, the near-line "
            f"embedders and the cycle with cycle.partitions = {self.new} "
            f"(SOLARIS_CYCLE__PARTITIONS={self.new})"
        )


def repartition(cfg: SolarisConfig, count: int) -> RepartitionReport:
    """Re-split ``cfg``'s namespace into ``count`` partitions (see the module docstring):
    :func:`begin`, :func:`move_streams`, :func:`resplit_intervals`,
    :func:`resplit_neighbour_lists`, :func:`remove_derived`, :func:`finish`. A rerun after
    a crash at any point finishes the same re-split.

    Raises:
        PartitionError: ``count`` is not a partition count.
        RepartitionError: refused (nothing written), or entries kept arriving.
        CycleInputError: a drain record's request-log file is missing or short (nothing
            written)."""
    plan = begin(cfg, count)
    report = RepartitionReport(plan.namespace.name, plan.old.count, plan.new.count, plan.resumed)
    report.moved = move_streams(plan)
    report.files = resplit_intervals(plan)
    report.files["neighbour_lists"] = resplit_neighbour_lists(plan)
    report.removed = remove_derived(plan)
    finish(plan)
    log.info("%s", report.describe())
    return report


# -- begin and finish ------------------------------------------------------------------------


def begin(cfg: SolarisConfig, count: int) -> Repartition:
    """Check the re-split of ``cfg``'s namespace into ``count`` partitions and record it as
    under way; or, when one to ``count`` is under way (an earlier run stopped), resume it.
    Nothing is written when it is refused.

    Raises:
        PartitionError: ``count`` is not a partition count.
        RepartitionError: the namespace records no count, or ``count``; another re-split is
            under way; a file or stream key cannot be read.
        CycleInputError: a drain record's request-log file is missing or short."""
    new = Partitioning(count)
    namespace = Namespace.of(cfg)
    redis = cycle_redis(cfg)
    plan = Repartition(namespace, redis, cfg.store.redis_type, new, new, resumed=False)
    client = plan.client()
    try:
        raw, pending = client.get(namespace.partitions_key), client.get(namespace.repartition_key)
        if pending is not None:
            old, to = _pending(namespace, pending)
            if to != new.count:
                raise RepartitionError(
                    f"namespace {namespace.name!r} is being re-split from {old} to {to} "
                    f"partitions (Redis key {namespace.repartition_key}), not {new.count}: "
                    f"finish that first (solaris namespace repartition {namespace.name} "
                    f"--partitions {to}), then change the count again; nothing was written"
                )
            log.info("resuming the re-split of %s from %d to %d", namespace.name, old, to)
            return _replace(plan, Partitioning(old), resumed=True)
        if raw is None:
            from solaris.connection import redacted

            raise RepartitionError(
                f"namespace {namespace.name!r} records no partition count (Redis key "
                f"{namespace.partitions_key} of {redacted(redis)}): no serving process or task has "
                "used it, so there is nothing to re-split (check the name and store.redis); "
                "a new namespace takes cycle.partitions (SOLARIS_CYCLE__PARTITIONS) at its "
                "first use; nothing was written"
            )
        recorded = int(raw)
        if recorded == new.count:
            raise RepartitionError(
                f"namespace {namespace.name!r} already records {recorded} partitions (Redis "
                f"key {namespace.partitions_key}): nothing to re-split; nothing was written"
            )
        plan = _replace(plan, Partitioning(recorded), resumed=False)
        _check_inputs(plan, client)
        target = json.dumps({"from": plan.old.count, "to": new.count})
        if not client.set(namespace.repartition_key, target, nx=True):
            raise RepartitionError(
                f"namespace {namespace.name!r}: another re-split began meanwhile (Redis key "
                f"{namespace.repartition_key}); rerun to see which; nothing was written"
            )
    finally:
        client.close()
    log.info("re-splitting %s from %d to %d", namespace.name, plan.old.count, new.count)
    return plan


def _replace(plan: Repartition, old: Partitioning, *, resumed: bool) -> Repartition:
    return Repartition(plan.namespace, plan.redis, plan.redis_type, old, plan.new, resumed)


def _pending(namespace: Namespace, raw: bytes) -> tuple[int, int]:
    """``(from, to)`` of the re-split recorded under way."""
    try:
        payload = json.loads(raw)
        old, to = payload["from"], payload["to"]
        old, to = Partitioning(old).count, Partitioning(to).count
    except (ValueError, KeyError, TypeError, PartitionError) as exc:
        raise RepartitionError(
            f"namespace {namespace.name!r}: the Redis key {namespace.repartition_key} holds "
            f"{raw[:80]!r}, not a re-split ({exc}); it is not SOLARIS's: delete it if no "
            "re-split is under way, and rerun"
        ) from None
    return old, to


def finish(plan: Repartition) -> None:
    """Record the new count, then end the re-split (its key deleted): the processes of the
    new count may start."""
    client = plan.client()
    try:
        client.set(plan.namespace.partitions_key, plan.new.count)
        client.delete(plan.namespace.repartition_key)
    finally:
        client.close()


def _check_inputs(plan: Repartition, client: Any) -> None:
    """What the re-split will read, before it writes anything: the stream keys are streams
    (or absent), every file to re-split opens (its footer), and every drain record's
    request-log file holds the rows it recorded (otherwise the re-split would record the
    loss as the new count's truth)."""
    from solaris.files import state_file_problem
    from solaris.orchestration.candidates import check_drained

    streams = {*plan.namespace.request_streams(plan.old)}
    streams |= {*plan.namespace.request_streams(plan.new)}
    for stream in sorted(streams):
        kind = client.type(stream)
        kind = kind.decode() if isinstance(kind, bytes) else str(kind)
        if kind not in ("stream", "none"):
            raise RepartitionError(
                f"{stream}: a request stream of namespace {plan.namespace.name!r} holds a "
                f"{kind}, not a stream: delete it (it is not SOLARIS's) and rerun; nothing "
                "was written"
            )
    layout = plan.layout
    files = [p for kind in INTERVAL_KINDS for _, found in _intervals(layout, kind) for p in found]
    files += [path for _, found in _neighbour_folders(layout) for path in found]
    for path in files:
        problem = state_file_problem(path)
        if problem is not None:
            raise RepartitionError(
                f"{path} is {problem}: the re-split of namespace {plan.namespace.name!r} "
                "would lose its rows; restore it (or remove it to go on without them) and "
                "rerun; nothing was written"
            )
    drained = layout.drained(Interval(0, 1), 0).parent.parent
    for entry in _listing(drained):
        if entry.is_dir() and not entry.name.startswith("."):
            interval = Interval.from_key(entry.name)
            check_drained(layout, interval, plan.old.count, range(plan.old.count))


# -- the streams -----------------------------------------------------------------------------


def move_streams(plan: Repartition) -> int:
    """Move every entry of the old count's request streams to its user's stream of the new
    count (fields unchanged; added there, then deleted here); returns how many moved. An
    entry already in its new stream stays; one whose copy is already there (an earlier run
    stopped between the two steps) is only deleted. Passes over the old streams until one
    moves nothing.

    Raises:
        RepartitionError: entries still arrived after :data:`_PASSES` passes (a serving
            process of the old count is logging): what moved stays moved."""
    from solaris.serving.request_log import stream_entries
    from solaris.serving.streams import StreamEntryError, decimal, entry_fields

    sources = plan.namespace.request_streams(plan.old)
    targets = plan.namespace.request_streams(plan.new)

    def target_of(fields: dict[bytes, bytes]) -> str:
        try:
            user = decimal(fields.get(b"user", b""), "user", 2**63)
        except StreamEntryError:
            return targets[0]  # unreadable: partition 0's drain deletes and counts it
        return targets[plan.new.of_user(user)]

    client = plan.client()
    try:
        seen = {
            t: {_digest(entry_fields(raw)) for _, raw in stream_entries(client, t)} for t in targets
        }
        moved = 0
        for _ in range(_PASSES):
            this = 0
            for source in dict.fromkeys(sources):
                this += _move(client, source, target_of, seen)
            moved += this
            if this == 0:
                return moved
            log.info("moved %d request-log entries; another pass", this)
    finally:
        client.close()
    raise RepartitionError(
        f"namespace {plan.namespace.name!r}: request-log entries kept arriving in the "
        f"streams of {plan.old.count} partitions over {_PASSES} passes: a serving process "
        "started with the old count is still logging. Stop it and rerun this command (what "
        "moved stays moved; the namespace stays refused to every process until it finishes)"
    )


def _move(
    client: Any,
    source: str,
    target_of: Callable[[dict[bytes, bytes]], str],
    seen: dict[str, set[bytes]],
) -> int:
    """One pass over ``source``, a page at a time: the page's entries added to their
    targets (one pipelined round trip), then deleted from it; returns how many left it."""
    from solaris.serving.request_log import stream_entries

    moved = 0
    page: list[tuple[bytes, Any]] = []
    for entry in stream_entries(client, source):
        page.append(entry)
        if len(page) == _PAGE:
            moved += _move_page(client, source, page, target_of, seen)
            page = []
    return moved + (_move_page(client, source, page, target_of, seen) if page else 0)


def _move_page(
    client: Any,
    source: str,
    page: list[tuple[bytes, Any]],
    target_of: Callable[[dict[bytes, bytes]], str],
    seen: dict[str, set[bytes]],
) -> int:
    from solaris.serving.request_log import delete_entries
    from solaris.serving.streams import entry_fields

    pipe = client.pipeline(transaction=False)
    gone = []
    for entry_id, raw in page:
        fields = entry_fields(raw)
        target = target_of(fields)
        if target == source:
            continue
        digest = _digest(fields)
        if digest not in seen[target]:
            pipe.xadd(target, fields)  # a new id, no MAXLEN: nothing trimmed by the move
            seen[target].add(digest)
        gone.append(entry_id)
    pipe.execute()  # every copy is in before an original is deleted
    if gone:
        delete_entries(client, source, gone)
    return len(gone)


def _digest(fields: dict[bytes, bytes]) -> bytes:
    """An entry's fields, as a short digest: its copy in another stream has the same."""
    h = hashlib.blake2b(digest_size=16)
    for key in sorted(fields):
        value = fields[key]
        h.update(len(key).to_bytes(4, "little") + key + len(value).to_bytes(8, "little") + value)
    return h.digest()


# -- the files -------------------------------------------------------------------------------


def resplit_intervals(plan: Repartition) -> dict[str, int]:
    """Every interval's request-log files, selection ledgers and near-line ledgers split by
    the new count (one file of the whole interval with one partition), and each interval's
    drain records rewritten from its new request-log files; returns the files written by
    kind."""
    layout = plan.layout
    written: dict[str, int] = {}
    for kind, spec in _INTERVAL_KINDS.items():
        path_of: Callable[..., StatePath] = getattr(layout, kind)
        count = 0
        for interval, found in _intervals(layout, kind):
            if plan.new.count == 1:
                targets = [path_of(interval)]
            else:
                targets = [path_of(interval, k) for k in range(plan.new.count)]
            tables = _resplit(found, targets, plan.new, spec)
            count += sum(1 for t in tables if t.num_rows or spec.every_partition)
            if plan.new.count == 1:
                _remove_folder(path_of(interval).parent / interval.key)
            if kind == "request_log":
                count += _redraw_drained(layout, interval, tables)
        written[kind] = count
    return written


def resplit_neighbour_lists(plan: Repartition) -> int:
    """The neighbour lists kept per partition (``neighbour_lists/<built_at>/<p>``) split by
    the new count (a partition without any: none, its users are queried again); returns the
    files written."""
    layout = plan.layout
    count = 0
    for built_at, found in _neighbour_folders(layout):
        targets = [layout.neighbour_lists(built_at, k) for k in range(plan.new.count)]
        tables = _resplit(found, targets, plan.new, _NEIGHBOUR_LISTS)
        count += sum(1 for t in tables if t.num_rows)
    return count


def remove_derived(plan: Repartition) -> list[str]:
    """Remove the per-partition state that is rebuilt when absent (:data:`DERIVED_KINDS`);
    returns the kinds that were there."""
    from solaris.files import remove_tree

    removed = []
    for kind, folder in _derived(plan.layout).items():
        if folder.is_dir():
            remove_tree(folder)
            removed.append(kind)
    return removed


def _intervals(layout: CycleLayout, kind: str) -> list[tuple[Interval, list[StatePath]]]:
    """Every interval of ``kind`` with its files: the whole interval's, its partitions',
    and the staged ones an interrupted re-split left."""
    path_of: Callable[..., StatePath] = getattr(layout, kind)
    out = []
    for interval in layout.intervals(kind, ending_after=-1, ending_by=_LAST_END):
        whole = path_of(interval)
        folder = whole.parent / interval.key
        found = [p for p in (whole, _staging(whole)) if p.is_file()]
        if folder.is_dir():
            found += _partition_files(folder)
        if found:
            out.append((interval, found))
    return out


def _neighbour_folders(layout: CycleLayout) -> list[tuple[int, list[StatePath]]]:
    """``(built_at, files)`` of every folder of kept neighbour lists."""
    root = layout.neighbour_lists(0, 0).parent.parent
    out = []
    for entry in _listing(root):
        if entry.name.isdigit() and entry.is_dir():
            found = _partition_files(entry)
            if found:
                out.append((int(entry.name), found))
    return out


def _listing(folder: StatePath) -> list[StatePath]:
    """The entries of ``folder`` by name (none when it is not there)."""
    return sorted(folder.iterdir(), key=str) if folder.is_dir() else []


def _partition_files(folder: StatePath) -> list[StatePath]:
    """A folder's partitions' files and the staged ones an interrupted re-split left."""
    found: list[StatePath] = [*folder.glob("[0-9]*.parquet"), *folder.glob(f"{_STAGING}*")]
    return sorted(found, key=str)


def _staging(path: StatePath) -> StatePath:
    return path.parent / f"{_STAGING}{path.name}"


def _resplit(
    found: Sequence[StatePath], targets: Sequence[StatePath], new: Partitioning, spec: _Kind
) -> list[pa.Table]:
    """The rows of ``found`` (copies removed) split by ``new`` into ``targets`` (one per
    partition): each written under its staging name, then all published, then every file of
    ``found`` that is not a target removed. Returns the tables, in partition order."""
    import pyarrow as pa

    from solaris.files import atomic_write_parquet, publish_file

    table = _union(found, spec)
    if new.count == 1:
        tables = [table]
    else:
        ids = table["user_id"].to_numpy()
        tables = [table.take(pa.array(rows)) for rows in new.split(ids)]
    staged = [
        (atomic_write_parquet(_staging(path), part), path)
        for path, part in zip(targets, tables, strict=True)
        if part.num_rows or spec.every_partition
    ]
    for stage, path in staged:  # every new file is whole before any old one is replaced
        publish_file(stage, path)
    published = {path for _, path in staged}
    for path in found:
        if path not in published:
            path.unlink(missing_ok=True)
    return tables


def _union(found: Sequence[StatePath], spec: _Kind) -> pa.Table:
    """The rows of every file of ``found``, one per key (an interrupted re-split leaves a
    row in an old file and its new one), sorted by the kind's order."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from solaris.files import arrow_source

    tables = []
    for path in found:
        where, filesystem = arrow_source(path)
        try:
            tables.append(pq.read_table(where, filesystem=filesystem))
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise RepartitionError(
                f"cannot read {path} ({type(exc).__name__}: {exc}); restore it and rerun "
                "(the re-split stays under way: every process is refused until it finishes)"
            ) from exc
    table = pa.concat_tables(tables, promote_options="default")
    columns = list(dict.fromkeys((*spec.order, *spec.key)))
    table = table.sort_by([(c, "ascending") for c in columns])
    if table.num_rows < 2:
        return table
    same = np.ones(table.num_rows - 1, dtype=bool)
    for column in spec.key:
        values = table[column].to_numpy()
        same &= values[1:] == values[:-1]
    return table.filter(pa.array(np.r_[True, ~same]))


def _redraw_drained(layout: CycleLayout, interval: Interval, tables: list[pa.Table]) -> int:
    """The interval's drain records of the new count, from its new request-log files (the
    rows each holds, which include every drained row), when the interval has any; the old
    count's others removed. Returns the records written."""
    import pyarrow.compute as pc

    from solaris.files import atomic_write_json

    folder = layout.drained(interval, 0).parent
    old: list[StatePath] = sorted(folder.glob("*.json"), key=str) if folder.is_dir() else []
    if not old:
        return 0
    written = set()
    for k, table in enumerate(tables):
        requests = len(pc.unique(table["request_id"])) if table.num_rows else 0
        record = {"rows": table.num_rows, "requests": requests}
        written.add(atomic_write_json(layout.drained(interval, k), record))
    for path in old:
        if path not in written:
            path.unlink(missing_ok=True)
    return len(written)


def _remove_folder(folder: StatePath) -> None:
    """The folder of an interval's partitions once its files are gone (one partition now)."""
    from solaris.files import remove_tree

    if folder.is_dir():
        remove_tree(folder)
