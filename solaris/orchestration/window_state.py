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

- ``window_state/<as_of>/<p>.npz``: the sums of each window and what they hold (the FM
  version, the windows, the intervals and their code generations);
- ``window_codes/<end>/<p>.arrow``: interval ``end``'s codes, one per pair (the serving
  version's), sorted by (user, item) in the fill codes' format: looked up by the later
  intervals that may supersede them, subtracted when the interval leaves a window, and
  merged into the fill's codes while within the TTL;
- ``retracted/<end>/<by>-<p>.arrow``: the codes of interval ``end`` that interval ``by``
  superseded.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
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
    from solaris.pipeline.window import Sums

__all__ = [
    "PartitionWindows",
    "pair_history",
    "partition_windows",
    "remove_expired",
    "window_spans",
]

_FORMAT = 1
log = logging.getLogger(__name__)


@dataclass
class PartitionWindows:
    """One partition's aggregates as of ``as_of``: ``uagg`` rows, ``iagg`` partial sums,
    user embeddings (None: not needed), fill codes; ``codes_read``, the code rows read from
    files; ``rebuilt``, whether the window's codes were read (no state to advance)."""

    uagg: pd.DataFrame
    item_partials: ItemPartials
    embeddings: pa.Table | None
    fill: CodeIndex
    codes_read: int
    rebuilt: bool = True
    figures: dict[str, int] = field(default_factory=dict)


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
    cfg: SolarisConfig, layout: CycleLayout, as_of: int, partition: int, fm_version: str
) -> PartitionWindows:
    """Partition ``partition``'s aggregates as of ``as_of`` (see the module docstring)."""
    if not cfg.cycle.incremental_windows:
        return _recomputed(cfg, as_of, partition, fm_version)
    spans = window_spans(cfg)
    widest = max(spans.values())
    expected = _generations(layout, as_of, widest)
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
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]  # numpy's stub: allow_pickle
    atomic_write_bytes(layout.window_state(state.as_of, partition), buffer.getvalue())


def _load(path: StatePath) -> _State | None:
    from solaris.pipeline.window import Sums

    try:
        with np.load(io.BytesIO(path.read_bytes()), allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            sums = {
                name: Sums(data[f"{name}.keys"], data[f"{name}.sums"], data[f"{name}.counts"])
                for name in meta["spans"]
                if name != "fill"
            }
    except (OSError, ValueError, KeyError):
        return None  # unreadable (a torn copy, an older format): rebuilt
    return _State(meta, sums)


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


def _generations(layout: CycleLayout, as_of: int, widest: int) -> list[tuple[int, str]]:
    """``(end, generation)`` of every interval embedded in ``(as_of − widest, as_of]``."""
    found = []
    for interval in layout.embedded_intervals(ending_after=as_of - widest, ending_by=as_of):
        codes = layout.published_codes(interval)
        if codes is not None:
            found.append((interval.end, codes.generation or ""))
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
) -> tuple[CodeIndex, int]:
    """Interval ``end``'s codes of the partition, one per pair, and the rows read. Raises
    when a code's ``computed_at`` is not its interval's end (the windows count a code in
    its interval's place)."""
    from solaris.pipeline.window import interval_codes

    history = pair_history(cfg, end, 1, partition)  # the intervals ending in (end - 1, end]
    pairs = history.pairs
    if len(pairs) and (pairs["computed_at"].to_numpy() != end).any():
        raise _NotByInterval
    keep = (pairs["fm_version"] == fm_version).to_numpy()
    codes = interval_codes(
        pairs["user_id"].to_numpy(), pairs["item_id"].to_numpy(), history.z, keep=keep
    )
    return codes, len(pairs)


class _NotByInterval(Exception):
    """Codes whose ``computed_at`` is not their interval's end: the windows are recomputed."""


def _read_codes(cfg: SolarisConfig, layout: CycleLayout, end: int, partition: int) -> CodeIndex:
    from solaris.data.schemas import read_fill_codes
    from solaris.pipeline.neighbors import CodeIndex

    return CodeIndex(*read_fill_codes(layout.window_codes(end, partition), z_dim=cfg.model.z_dim))


def _write_codes(path: StatePath, codes: CodeIndex) -> None:
    from solaris.data.schemas import write_fill_codes

    write_fill_codes(path, np.asarray(codes.users), np.asarray(codes.items), codes.z16)


def _retracted(
    cfg: SolarisConfig, layout: CycleLayout, origin: int, before: int, partition: int
) -> Iterator[CodeIndex]:
    """The retractions of interval ``origin``'s codes recorded by intervals before
    ``before``."""
    from solaris.data.schemas import read_fill_codes
    from solaris.pipeline.neighbors import CodeIndex

    folder = layout.root / "retracted" / f"{origin:011d}"
    suffix = f"-{partition:05d}.arrow"
    names = sorted(entry.name for entry in folder.iterdir()) if folder.is_dir() else []
    for name in names:
        by = name.split("-", 1)[0]
        if name.endswith(suffix) and by.isdigit() and int(by) < before:
            yield CodeIndex(*read_fill_codes(folder / name, z_dim=cfg.model.z_dim))


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
    and its own codes added."""
    from solaris.pipeline.window import find_pairs, without_pairs

    version = str(state.meta["fm_version"])
    sums = dict(state.sums)
    held = list(state.intervals)
    now = state.as_of
    read = {"own": 0, "expired": 0, "probed": 0, "retracted": 0}

    def expire(to: int) -> None:
        for name, span in spans.items():
            if name == "fill":
                continue
            for end, _ in held:
                if now - span < end <= to - span:  # in the window at ``now``, not at ``to``
                    live = _read_codes(cfg, layout, end, partition)
                    for gone in _retracted(cfg, layout, end, end + span, partition):
                        live = without_pairs(live, gone.users, gone.items)
                    read["expired"] += len(live)
                    sums[name] = sums[name].plus(_keys(name, live), live.z16, sign=-1)

    try:
        fresh = [(end, gen) for end, gen in expected if end > state.as_of]
        for end, gen in fresh:
            expire(end)
            now = end
            codes, rows = _interval_codes(cfg, layout, end, partition, version)
            read["own"] += rows
            _write_codes(layout.window_codes(end, partition), codes)
            left = np.ones(len(codes), np.bool_)
            for origin, _ in sorted(held, reverse=True):  # the newest code of a pair first
                if origin <= end - max(spans.values()) or not left.any():
                    continue
                k_left = np.flatnonzero(left)
                earlier = _read_codes(cfg, layout, origin, partition)
                k, rows_hit = find_pairs(
                    np.asarray(codes.users)[k_left], np.asarray(codes.items)[k_left], earlier
                )
                read["probed"] += len(k_left)
                if not len(k):
                    continue
                left[k_left[k]] = False
                gone = _take(earlier, rows_hit)
                _write_codes(layout.retracted(origin, end, partition), gone)
                read["retracted"] += len(gone)
                for name, span in spans.items():
                    if name != "fill" and origin > end - span:
                        sums[name] = sums[name].plus(_keys(name, gone), gone.z16, sign=-1)
            for name in sums:
                sums[name] = sums[name].plus(_keys(name, codes), codes.z16)
            held.append((end, gen))
        expire(as_of)
    except _NotByInterval:
        return _recomputed(cfg, as_of, partition, version)
    now = as_of
    widest = max(spans.values())
    held = [(end, gen) for end, gen in held if end > as_of - widest]
    meta = {**state.meta, "as_of": as_of, "intervals": held}
    _save(layout, partition, _State(meta, sums))
    fill, fill_read = _fill_codes(cfg, layout, as_of, partition, held, spans["fill"])
    codes_read = read["own"] + read["expired"] + read["retracted"] + fill_read
    return _views(cfg, as_of, version, sums, fill, codes_read, rebuilt=False, figures=read)


def _rebuilt(
    cfg: SolarisConfig,
    layout: CycleLayout,
    as_of: int,
    partition: int,
    fm_version: str,
    expected: list[tuple[int, str]],
    meta: dict[str, Any],
) -> PartitionWindows:
    """The state built from the window's codes, with each interval's codes and the
    retractions a replay would have recorded written for the intervals to come."""
    from solaris.files import remove_tree
    from solaris.pipeline.window import Sums, interval_codes, supersessions

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
        folder = layout.root / "retracted" / f"{end:011d}"
        for entry in folder.iterdir() if folder.is_dir() else ():
            if entry.name.endswith(f"-{partition:05d}.arrow"):
                remove_tree(entry) if entry.is_dir() else entry.unlink()
        per_interval.append((end, codes))
    for origin, by, rows in supersessions(per_interval):
        codes = dict(per_interval)[origin]
        _write_codes(layout.retracted(origin, by, partition), _take(codes, rows))
    sums = {}
    for name, span in spans.items():
        if name == "fill":
            continue
        latest = _latest(per_interval, as_of - span)
        sums[name] = Sums.of(_keys(name, latest), latest.z16)
    state = _State({**meta, "as_of": as_of, "intervals": expected}, sums)
    _save(layout, partition, state)
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
) -> PartitionWindows:
    import pyarrow as pa

    from solaris.pipeline.aggregate import ItemPartials, user_rows

    uagg = sums["uagg"]
    rows = user_rows(
        uagg.keys,
        uagg.sums,
        uagg.counts,
        as_of=as_of,
        window_seconds=cfg.store.uagg_window_seconds,
        fm_version=fm_version,
    )
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
    for kind in ("window_codes", "retracted"):
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
