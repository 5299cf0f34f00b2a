"""The enrichment's windows, carried from one interval to the next, per partition.

:func:`partition_windows` gives one partition's aggregates as of an interval end: its users'
``uagg`` sums, its share of ``iagg``, its users' embeddings and its codes fresh for the
neighbour fill. With ``cycle.incremental_windows`` (the default) they come from the
partition's state as of the previous interval, advanced by the intervals embedded since
(:mod:`solaris.pipeline.window` says how, and why the sums stay exact); the state is
rebuilt from the window's codes when it cannot be advanced (none yet, another FM version,
partition count or window, or an interval of its window re-embedded or published late).
Without it, every interval recomputes them from the window's codes.

The files, under the namespace's cycle root, per partition ``p``:

- ``window_state/<as_of>/<p>.npz``: the sums of each window, the pair index (the interval
  of every pair's latest code in the widest window) and the retractions (the codes
  superseded while their interval is in a window), with what they hold (the FM version,
  the windows, the intervals and their completion markers' digests);
- ``window_codes/<end>/<p>.arrow``: interval ``end``'s codes, one per pair (the serving
  version's), sorted by (user, item) in the fill codes' format: read again when a later
  interval supersedes some of them (only the intervals the pair index names), when the
  interval leaves a window, and while it is within the TTL (the fill's codes).
"""

from __future__ import annotations

import io
import json
import logging
import zipfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from solaris.data.schemas import SchemaError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from solaris.config import SolarisConfig
    from solaris.files import StatePath
    from solaris.orchestration.layout import CycleLayout
    from solaris.pipeline.aggregate import ItemPartials
    from solaris.pipeline.enrich import PairHistory
    from solaris.pipeline.neighbors import CodeIndex
    from solaris.pipeline.window import PairIndex, Retractions, Sums

__all__ = [
    "PartitionWindows",
    "pair_history",
    "partition_windows",
    "published_markers",
    "remove_expired",
    "window_spans",
]

_FORMAT = 1
log = logging.getLogger(__name__)


@dataclass
class PartitionWindows:
    """One partition's aggregates as of ``as_of``: ``uagg`` rows, ``iagg`` partial sums,
    user embeddings (None: not needed), fill codes; ``codes_read``, the code rows read from
    files; ``rebuilt``, whether the window's codes were read (no state to advance);
    ``uagg_changed``, the rows of the users whose sums the advance changed (None: every
    row is to be written, see :attr:`uagg_to_write`)."""

    uagg: pd.DataFrame
    item_partials: ItemPartials
    embeddings: pa.Table | None
    fill: CodeIndex
    codes_read: int
    rebuilt: bool = True
    figures: dict[str, int] = field(default_factory=dict)
    uagg_changed: pd.DataFrame | None = None

    @property
    def uagg_to_write(self) -> pd.DataFrame:
        """The ``uagg`` rows the store needs: those of the users whose sums changed when the
        windows were advanced, every row otherwise. A user whose codes did not change since
        its row was written has the same sum and count now: the row still in the store
        serves the same features (its window holds the same codes, and the pair test of
        the mean without the item gives the same answer), and it stays fresh until the
        next change, since its oldest code leaves the window at most a window after the
        row was written (``store.uagg_ttl_hours`` >= ``uagg_window_hours``: otherwise
        every row is written)."""
        return self.uagg if self.uagg_changed is None else self.uagg_changed


def window_spans(cfg: SolarisConfig) -> dict[str, int]:
    """The windows the enrichment carries, in seconds: ``uagg`` (per user) and ``iagg``
    (per item) over the user aggregate's window, ``emb`` (per user) over the neighbour
    window when the index is rebuilt every interval, ``fill`` over the codes' TTL."""
    spans = {
        "uagg": cfg.store.uagg_window_seconds,
        "iagg": cfg.store.uagg_window_seconds,
        "fill": cfg.selection.ttl_seconds,
    }
    if cfg.cycle.neighbours_every_interval:
        spans["emb"] = cfg.store.unn_ttl_seconds
    return spans


def partition_windows(
    cfg: SolarisConfig,
    layout: CycleLayout,
    as_of: int,
    partition: int,
    fm_version: str,
    markers: list[tuple[int, str]] | None = None,
) -> PartitionWindows:
    """Partition ``partition``'s aggregates as of ``as_of`` (see the module docstring).
    ``markers``: :func:`published_markers` as of ``as_of``, read once for a task's
    partitions (read here when not given)."""
    if not cfg.cycle.incremental_windows:
        return _recomputed(cfg, as_of, partition, fm_version)
    spans = window_spans(cfg)
    widest = max(spans.values())
    expected = published_markers(cfg, layout, as_of) if markers is None else markers
    state = _previous_state(layout, as_of, partition)
    meta = {
        "format": _FORMAT,
        "fm_version": fm_version,
        "partitions": cfg.cycle.partitions,
        "z_dim": cfg.model.z_dim,
        "spans": spans,
    }
    if state is not None and _advances(state, meta, expected, as_of, widest):
        try:
            return _advanced(cfg, layout, as_of, partition, state, expected, spans)
        except SchemaError as exc:  # an interval's codes or retractions lost or torn
            log.warning("partition %d as of %d: %s; its windows are rebuilt", partition, as_of, exc)
    return _rebuilt(cfg, layout, as_of, partition, fm_version, expected, meta)


# --------------------------------------------------------------------------------------------
# The state file
# --------------------------------------------------------------------------------------------


@dataclass
class _State:
    meta: dict[str, Any]
    sums: dict[str, Sums]
    index: PairIndex
    retracted: Retractions

    @property
    def as_of(self) -> int:
        return int(self.meta["as_of"])

    @property
    def intervals(self) -> list[tuple[int, str]]:
        return [(int(end), str(gen)) for end, gen in self.meta["intervals"]]


def _save(layout: CycleLayout, partition: int, state: _State) -> None:
    from solaris.files import atomic_write_bytes

    arrays: dict[str, np.ndarray] = {"meta": np.array(json.dumps(state.meta))}
    for name, sums in state.sums.items():
        arrays[f"{name}.keys"] = sums.keys
        arrays[f"{name}.sums"] = sums.sums
        arrays[f"{name}.counts"] = sums.counts
    arrays["index.users"] = state.index.users
    arrays["index.items"] = state.index.items
    arrays["index.origin"] = state.index.origin
    for name in ("users", "items", "origin", "by"):
        arrays[f"retracted.{name}"] = getattr(state.retracted, name)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]  # numpy's stub: allow_pickle
    atomic_write_bytes(layout.window_state(state.as_of, partition), buffer.getvalue())


def _load(path: StatePath) -> _State | None:
    from solaris.files import read_state_bytes
    from solaris.pipeline.window import PairIndex, Retractions, Sums

    try:
        with np.load(io.BytesIO(read_state_bytes(path)), allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            sums = {
                name: Sums(data[f"{name}.keys"], data[f"{name}.sums"], data[f"{name}.counts"])
                for name in meta["spans"]
                if name != "fill"
            }
            index = PairIndex(data["index.users"], data["index.items"], data["index.origin"])
            retracted = Retractions(
                *(data[f"retracted.{name}"] for name in ("users", "items", "origin", "by"))
            )
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        # unreadable (a torn copy, an older format): rebuilt
        log.warning(
            "%s: unreadable (%s: %s); its windows are rebuilt", path, type(exc).__name__, exc
        )
        return None
    return _State(meta, sums, index, retracted)


def _previous_state(layout: CycleLayout, as_of: int, partition: int) -> _State | None:
    """The partition's newest state as of an interval end before ``as_of``."""
    folder = layout.root / "window_state"
    ends = sorted(
        int(entry.name)
        for entry in (folder.iterdir() if folder.is_dir() else ())
        if entry.name.isdigit() and int(entry.name) < as_of
    )
    for end in reversed(ends):
        path = layout.window_state(end, partition)
        if path.is_file():
            return _load(path)
    return None


def published_markers(cfg: SolarisConfig, layout: CycleLayout, as_of: int) -> list[tuple[int, str]]:
    """``(end, marker)`` of every interval embedded within the widest window before
    ``as_of``: the digest of its completion marker, which a rerun of its embeddings
    rewrites (one listing and one small read per interval, no shard paths)."""
    import hashlib

    from solaris.files import read_state_bytes

    widest = max(window_spans(cfg).values())
    found = []
    for interval in layout.intervals(
        "pair_embeddings", ending_after=as_of - widest, ending_by=as_of
    ):
        try:
            text = read_state_bytes(layout.embeddings_done(interval))  # remote: one GET
        except FileNotFoundError:
            continue  # not embedded (yet)
        found.append((interval.end, hashlib.sha1(text).hexdigest()[:16]))
    return found


def _advances(
    state: _State, meta: dict[str, Any], expected: list[tuple[int, str]], as_of: int, widest: int
) -> bool:
    """Whether ``state`` can be advanced to ``as_of``: same settings, and the intervals it
    holds are exactly the ones now published up to its time (none re-embedded or late)."""
    if any(state.meta.get(k) != v for k, v in meta.items()):
        return False
    held = [(end, gen) for end, gen in state.intervals if end > as_of - widest]
    return held == [(end, gen) for end, gen in expected if end <= state.as_of]


# --------------------------------------------------------------------------------------------
# Reading codes
# --------------------------------------------------------------------------------------------


def pair_history(
    cfg: SolarisConfig, as_of: int, window_s: int, partition: int | None = None
) -> PairHistory:
    """:class:`~solaris.pipeline.enrich.PairHistory` of the codes computed in
    ``(as_of - window_s, as_of]``; only partition ``partition``'s users' codes when given
    (only the shards that hold it are read)."""

    from solaris.data.schemas import read_table
    from solaris.namespace import Namespace
    from solaris.orchestration.layout import CycleLayout
    from solaris.pipeline.enrich import PairHistory
    from solaris.store.partitions import Partitioning

    layout = CycleLayout(Namespace.of(cfg))
    count = cfg.cycle.partitions
    intervals = layout.embedded_intervals(ending_after=as_of - window_s, ending_by=as_of)
    # Exactly the files each marker counts: a generation being replaced fails the read on
    # a missing file (the task's retry reads the new one), it is never read in part.
    files: list[StatePath] = []
    mixed = False
    for interval in intervals:
        codes = layout.published_codes(interval)
        if codes is None:
            continue
        if partition is None:
            files += codes.files
        else:
            mine, shared = codes.files_of(partition, count)
            files += mine
            mixed |= shared
    table = read_table(files, "pair_embeddings", z_dim=cfg.model.z_dim)
    if mixed and partition is not None:  # shards that hold other partitions too: keep its rows
        table = table.filter(Partitioning(count).holds(table["user_id"].to_numpy(), partition))
    return PairHistory.from_table(table)


def _interval_codes(
    cfg: SolarisConfig, layout: CycleLayout, end: int, partition: int, fm_version: str
) -> tuple[CodeIndex, int] | None:
    """Interval ``end``'s codes of the partition, one per pair, and the rows read; None
    when a code's ``computed_at`` is not its interval's end (the windows count a code in
    its interval's place: such codes are recomputed with the window)."""
    from solaris.pipeline.window import interval_codes

    history = pair_history(cfg, end, 1, partition)  # the intervals ending in (end - 1, end]
    pairs = history.pairs
    if len(pairs) and (pairs["computed_at"].to_numpy() != end).any():
        return None
    keep = (pairs["fm_version"] == fm_version).to_numpy()
    codes = interval_codes(
        pairs["user_id"].to_numpy(), pairs["item_id"].to_numpy(), history.z, keep=keep
    )
    return codes, len(pairs)


def _read_codes(cfg: SolarisConfig, layout: CycleLayout, end: int, partition: int) -> CodeIndex:
    from solaris.data.fill_codes import read_fill_codes
    from solaris.pipeline.neighbors import CodeIndex

    return CodeIndex(*read_fill_codes(layout.window_codes(end, partition), z_dim=cfg.model.z_dim))


def _write_codes(path: StatePath, codes: CodeIndex) -> None:
    from solaris.data.fill_codes import write_fill_codes

    write_fill_codes(path, np.asarray(codes.users), np.asarray(codes.items), codes.z16)


# --------------------------------------------------------------------------------------------
# Advancing, rebuilding, recomputing
# --------------------------------------------------------------------------------------------


def _advanced(
    cfg: SolarisConfig,
    layout: CycleLayout,
    as_of: int,
    partition: int,
    state: _State,
    expected: list[tuple[int, str]],
    spans: dict[str, int],
) -> PartitionWindows:
    """The state advanced interval by interval to ``as_of``: for each new interval, the
    codes leaving each window are subtracted, the codes the interval supersedes retracted
    and its own codes added (one merge per window and interval)."""
    from solaris.pipeline.window import find_pairs, without_pairs

    version = str(state.meta["fm_version"])
    sums = dict(state.sums)
    index, retracted = state.index, state.retracted
    widest = max(spans.values())
    held = list(state.intervals)
    now = state.as_of
    read = {"own": 0, "expired": 0, "retracted": 0}
    deltas: dict[str, list[tuple[np.ndarray, np.ndarray, int]]] = {name: [] for name in sums}

    def expire(to: int) -> None:
        """Subtract the live codes of the intervals leaving each window by ``to``."""
        for name, span in spans.items():
            for end, _ in held if name in sums else ():
                if now - span < end <= to - span:  # in the window at ``now``, not at ``to``
                    live = _read_codes(cfg, layout, end, partition)
                    live = without_pairs(live, *retracted.of(end, before=end + span))
                    read["expired"] += len(live)
                    deltas[name].append((_keys(name, live), live.z16, -1))

    touched: list[np.ndarray] = []  # the users whose uagg sums the advance changed

    def merge() -> None:
        touched.extend(keys for keys, _, _ in deltas.get("uagg", ()))
        for name, parts in deltas.items():
            sums[name] = sums[name].plus_all(parts)
            parts.clear()

    for end, gen in [(end, gen) for end, gen in expected if end > state.as_of]:
        expire(end)
        now = end
        own = _interval_codes(cfg, layout, end, partition, version)
        if own is None:
            return _recomputed(cfg, as_of, partition, version)
        codes, rows = own
        read["own"] += rows
        _write_codes(layout.window_codes(end, partition), codes)
        # The codes it supersedes: the pairs the index holds, looked up once, then
        # their codes in the files of the intervals they came from (those only).
        index = index.after(end - widest)
        found = find_pairs(np.asarray(codes.users), np.asarray(codes.items), index)
        origins = index.origin[found[1]]
        for origin in np.unique(origins).tolist():
            mine = found[0][origins == origin]
            earlier = _read_codes(cfg, layout, origin, partition)
            users, items = np.asarray(codes.users)[mine], np.asarray(codes.items)[mine]
            k, rows_hit = find_pairs(users, items, earlier)
            if len(k) != len(mine):
                raise SchemaError(
                    str(layout.window_codes(origin, partition)),
                    None,
                    f"{len(mine) - len(k)} codes the window's pair index places here are not in it",
                )
            gone = _take(earlier, rows_hit)
            retracted = retracted.plus(gone.users, gone.items, origin, end)
            read["retracted"] += len(gone)
            for name, span in spans.items():
                if name in sums and origin > end - span:
                    deltas[name].append((_keys(name, gone), gone.z16, -1))
        index = index.with_codes(codes, end, found)
        for name in sums:
            deltas[name].append((_keys(name, codes), codes.z16, 1))
        merge()
        held.append((end, gen))
    expire(as_of)
    merge()
    held = [(end, gen) for end, gen in held if end > as_of - widest]
    meta = {**state.meta, "as_of": as_of, "intervals": held}
    kept = _State(meta, sums, index.after(as_of - widest), retracted.after(as_of - widest))
    _save(layout, partition, kept)
    fill, fill_read = _fill_codes(cfg, layout, as_of, partition, held, spans["fill"])
    codes_read = read["own"] + read["expired"] + read["retracted"] + fill_read
    changed = None
    if cfg.store.uagg_ttl_seconds >= cfg.store.uagg_window_seconds:
        changed = np.unique(np.concatenate(touched)) if touched else np.zeros(0, np.int64)
    return _views(
        cfg, as_of, version, sums, fill, codes_read, rebuilt=False, figures=read, changed=changed
    )


def _rebuilt(
    cfg: SolarisConfig,
    layout: CycleLayout,
    as_of: int,
    partition: int,
    fm_version: str,
    expected: list[tuple[int, str]],
    meta: dict[str, Any],
) -> PartitionWindows:
    """The state built from the window's codes, with each interval's codes written and the
    retractions a replay would have recorded, for the intervals to come."""
    from solaris.pipeline.window import (
        PairIndex,
        Retractions,
        Sums,
        interval_codes,
        supersessions,
    )

    spans = meta["spans"]
    widest = max(spans.values())
    history = pair_history(cfg, as_of, widest, partition)
    pairs = history.pairs
    ends = {end for end, _ in expected}
    t = pairs["computed_at"].to_numpy()
    if len(pairs) and not np.isin(t, list(ends)).all():
        return _recomputed(cfg, as_of, partition, fm_version, history=history)
    version_ok = (pairs["fm_version"] == fm_version).to_numpy()
    users, items = pairs["user_id"].to_numpy(), pairs["item_id"].to_numpy()
    per_interval = []
    for end, _ in expected:
        codes = interval_codes(users, items, history.z, keep=version_ok & (t == end))
        _write_codes(layout.window_codes(end, partition), codes)
        per_interval.append((end, codes))
    retracted = Retractions.empty()
    by_end = dict(per_interval)
    for origin, by, rows in supersessions(per_interval):
        gone = _take(by_end[origin], rows)
        retracted = retracted.plus(gone.users, gone.items, origin, by)
    sums = {}
    for name, span in spans.items():
        if name != "fill":
            latest = _latest(per_interval, as_of - span)
            sums[name] = Sums.of(_keys(name, latest), latest.z16)
    index = PairIndex.of(per_interval)
    _save(
        layout,
        partition,
        _State({**meta, "as_of": as_of, "intervals": expected}, sums, index, retracted),
    )
    fill = _latest(per_interval, as_of - spans["fill"])
    return _views(cfg, as_of, fm_version, sums, fill, len(pairs), rebuilt=True)


def _recomputed(
    cfg: SolarisConfig, as_of: int, partition: int, fm_version: str, history: Any = None
) -> PartitionWindows:
    """Every view from the window's codes (the path without a carried state)."""
    from solaris.pipeline.enrich import (
        fill_codes,
        item_partials,
        user_aggregates,
        user_embedding_table,
    )

    spans = window_spans(cfg)
    if history is None:
        history = pair_history(cfg, as_of, max(spans.values()), partition)
    embeddings = None
    if "emb" in spans:
        embeddings = user_embedding_table(history, as_of, cfg, fm_version)
    return PartitionWindows(
        uagg=user_aggregates(history, as_of, cfg, fm_version),
        item_partials=item_partials(history, as_of, cfg, fm_version),
        embeddings=embeddings,
        fill=fill_codes(history, as_of, spans["fill"], fm_version),
        codes_read=len(history.pairs),
    )


def _views(
    cfg: SolarisConfig,
    as_of: int,
    fm_version: str,
    sums: dict[str, Sums],
    fill: CodeIndex,
    codes_read: int,
    *,
    rebuilt: bool,
    figures: dict[str, int] | None = None,
    changed: np.ndarray | None = None,
) -> PartitionWindows:
    """The views of the sums; ``changed``: the users whose ``uagg`` sums changed (their
    rows are :attr:`PartitionWindows.uagg_changed`: those still in the window)."""
    import pyarrow as pa

    from solaris.pipeline.aggregate import ItemPartials, user_rows

    uagg = sums["uagg"]

    def rows_of(keep: slice | np.ndarray) -> pd.DataFrame:
        return user_rows(
            uagg.keys[keep],
            uagg.sums[keep],
            uagg.counts[keep],
            as_of=as_of,
            window_seconds=cfg.store.uagg_window_seconds,
            fm_version=fm_version,
        )

    rows = rows_of(slice(None))
    changed_rows = None
    if changed is not None:
        changed_rows = rows_of(np.isin(uagg.keys, changed, assume_unique=True))
    iagg = sums["iagg"]
    embeddings = None
    if "emb" in sums:
        emb = sums["emb"]
        means = (emb.sums / np.maximum(emb.counts, 1)[:, None]).astype(np.float32)
        flat = pa.array(np.ascontiguousarray(means).reshape(-1))
        embeddings = pa.table(
            {
                "user_id": pa.array(emb.keys, pa.int64()),
                "emb": pa.FixedSizeListArray.from_arrays(flat, int(cfg.model.z_dim)),
            }
        )
    return PartitionWindows(
        uagg=rows,
        item_partials=ItemPartials(iagg.keys, iagg.sums, iagg.counts),
        embeddings=embeddings,
        fill=fill,
        codes_read=codes_read,
        rebuilt=rebuilt,
        figures=dict(figures or {}),
        uagg_changed=changed_rows,
    )


def _fill_codes(
    cfg: SolarisConfig,
    layout: CycleLayout,
    as_of: int,
    partition: int,
    held: list[tuple[int, str]],
    ttl: int,
) -> tuple[CodeIndex, int]:
    """The latest code of each pair over the intervals within the TTL."""
    within = [end for end, _ in held if end > as_of - ttl]
    fresh = [(end, _read_codes(cfg, layout, end, partition)) for end in within]
    return _latest(fresh, as_of - ttl), sum(len(c) for _, c in fresh)


def _latest(per_interval: list[tuple[int, CodeIndex]], after: int) -> CodeIndex:
    from solaris.pipeline.window import latest_codes

    return latest_codes([(end, c) for end, c in per_interval if end > after])


def _keys(name: str, codes: CodeIndex) -> np.ndarray:
    """The key a window sums by: the item for ``iagg``, the user otherwise."""
    return np.asarray(codes.items if name == "iagg" else codes.users)


def _take(codes: CodeIndex, rows: np.ndarray) -> CodeIndex:
    from solaris.pipeline.neighbors import CodeIndex

    rows = np.sort(rows)
    return CodeIndex(
        np.asarray(codes.users)[rows],
        np.asarray(codes.items)[rows],
        np.ascontiguousarray(np.asarray(codes.z16)[rows], np.float16),
    )


def remove_expired(cfg: SolarisConfig, layout: CycleLayout, as_of: int) -> None:
    """After every partition advanced to ``as_of``: the interval codes and retractions no
    window holds any more, and the states before the previous one."""
    from solaris.files import remove_tree

    widest = max(window_spans(cfg).values())
    for kind in ("window_codes",):
        folder = layout.root / kind
        for entry in folder.iterdir() if folder.is_dir() else ():
            if entry.name.isdigit() and int(entry.name) <= as_of - widest:
                remove_tree(entry)
    folder = layout.root / "window_state"
    ends = sorted(
        int(e.name) for e in (folder.iterdir() if folder.is_dir() else ()) if e.name.isdigit()
    )
    earlier = [end for end in ends if end < as_of]
    for end in earlier[:-1]:  # the previous state stays: a retry of this interval needs it
        remove_tree(folder / f"{end:011d}")
