"""The enrichment's carried windows: a long history replayed interval by interval gives
the bytes a recomputation from the window's codes gives, with one partition and with eight,
through re-selected pairs, codes leaving each window, two FM versions, duplicates within
an interval, an interval re-embedded and an interval published late."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from solaris.config import SolarisConfig
from solaris.data.schemas import pair_embeddings_schema
from solaris.namespace import Namespace
from solaris.orchestration.layout import CycleLayout, Interval
from solaris.orchestration.window_state import (
    PartitionWindows,
    partition_windows,
    remove_expired,
)

CADENCE = 900
START = 1_700_000_100 - 1_700_000_100 % CADENCE
Z_DIM = 4


def _cfg(tmp_path, partitions: int, incremental: bool) -> SolarisConfig:
    return SolarisConfig(
        namespace="t_windows",
        artifacts_dir=tmp_path,
        model={"z_dim": Z_DIM},
        selection={"ttl_hours": 1.0, "cadence_minutes": 15.0},
        store={"uagg_window_hours": 2.0, "unn_ttl_hours": 3.0},
        cycle={"partitions": partitions, "incremental_windows": incremental},
    )


def _publish(layout: CycleLayout, end: int, generation: str, rng: np.random.Generator) -> None:
    """Interval ``end``'s codes as the embeddings run publishes them: one shard of a
    generation and the marker naming it. Few users and items, so pairs come back (a code
    superseded inside every window), some twice in one interval, some of another version."""
    interval = Interval(end - CADENCE, end)
    n = 40
    users = rng.integers(0, 30, n)
    items = rng.integers(0, 12, n)
    z = (rng.standard_normal((n, Z_DIM)) * 3).astype(np.float32)
    versions = np.where(rng.random(n) < 0.15, "v0", "v1")
    table = pa.table(
        {
            "user_id": pa.array(users, pa.int64()),
            "item_id": pa.array(items, pa.int64()),
            "z": pa.FixedSizeListArray.from_arrays(pa.array(z.reshape(-1)), Z_DIM),
            "fm_version": pa.array(versions, pa.string()),
            "computed_at": pa.array(np.full(n, end * 1_000_000), pa.timestamp("us", tz="UTC")),
        },
        schema=pair_embeddings_schema(Z_DIM),
    )
    shard = layout.embeddings(interval, 0, generation)
    shard.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, shard)
    marker = layout.embeddings_done(interval)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({"generation": generation, "shards": 1}))


def _frame_bytes(frame: pd.DataFrame) -> list:
    return [
        (c, [np.asarray(v).tobytes() if isinstance(v, np.ndarray) else v for v in frame[c]])
        for c in frame.columns
    ]


def _same(a: PartitionWindows, b: PartitionWindows) -> None:
    assert _frame_bytes(a.uagg) == _frame_bytes(b.uagg)
    for name in ("items", "sums", "counts"):
        x, y = getattr(a.item_partials, name), getattr(b.item_partials, name)
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), name
    assert a.embeddings is not None and b.embeddings is not None
    assert a.embeddings.equals(b.embeddings)
    for name in ("users", "items", "z16"):
        x, y = np.asarray(getattr(a.fill, name)), np.asarray(getattr(b.fill, name))
        assert x.tobytes() == y.tobytes() and len(x) == len(y), name


@pytest.mark.parametrize("partitions", [1, 8])
def test_carried_windows_serve_the_bytes_a_recomputation_serves(tmp_path, partitions) -> None:
    carried = _cfg(tmp_path, partitions, incremental=True)
    recomputed = _cfg(tmp_path, partitions, incremental=False)
    layout = CycleLayout(Namespace.of(carried))
    rng = np.random.default_rng(7)
    ends = [START + CADENCE * k for k in range(1, 41)]  # 10 h: each window passes 3-10 times
    late = ends[20]
    advanced = rebuilt = retracted = 0
    for k, end in enumerate(ends):
        if end != late:
            _publish(layout, end, f"a{k:04d}aa", rng)
        if end == ends[22]:  # the late interval is published now, two intervals behind
            _publish(layout, late, "bbbbbbbb", rng)
        if end == ends[30]:  # an interval inside every window is re-embedded
            _publish(layout, ends[27], "cccccccc", rng)
        version = "v0" if end == ends[35] else "v1"  # a version switch and back
        for partition in range(partitions):
            got = partition_windows(carried, layout, end, partition, version)
            want = partition_windows(recomputed, layout, end, partition, version)
            _same(got, want)
            advanced += not got.rebuilt
            rebuilt += got.rebuilt
            retracted += got.figures.get("retracted", 0)
        remove_expired(carried, layout, end)
    # The sums were carried, not recomputed, apart from the first interval and the changes
    # above (a late interval, a re-embedded one, the version there and back).
    assert rebuilt == 5 * partitions
    assert advanced == (len(ends) - 5) * partitions
    assert retracted > 0  # pairs were superseded inside a window
    held = sorted(int(p.name) for p in (layout.root / "window_codes").iterdir())
    assert held[0] > ends[-1] - 3 * 3_600  # interval codes no window holds are gone


def test_an_interval_reads_its_own_codes_not_the_window(tmp_path) -> None:
    """In steady state an interval reads its own codes, those leaving a window and the
    fill's TTL: far fewer than the 3 h window holds."""
    cfg = _cfg(tmp_path, 1, incremental=True)
    full = _cfg(tmp_path, 1, incremental=False)
    layout = CycleLayout(Namespace.of(cfg))
    rng = np.random.default_rng(3)
    ends = [START + CADENCE * k for k in range(1, 25)]
    for k, end in enumerate(ends):
        _publish(layout, end, f"d{k:04d}bb", rng)
        got = partition_windows(cfg, layout, end, 0, "v1")
    want = partition_windows(full, layout, ends[-1], 0, "v1")
    assert not got.rebuilt
    assert got.figures["own"] == 40  # one interval's rows
    assert want.codes_read == 12 * 40  # the widest window's rows
    # Its own interval, one leaving interval per window (uagg/iagg, emb), the fill's four
    # intervals within the TTL and the codes it superseded: whatever the windows' length.
    bound = 40 * (1 + 2 + 4) + got.figures["retracted"]
    assert got.codes_read <= bound < want.codes_read


def test_a_lost_interval_codes_file_rebuilds_the_windows_from_the_codes(tmp_path) -> None:
    """The carried files are derived from the published codes: one lost (or torn) makes
    the next interval rebuild its windows, with the bytes of a recomputation, not fail."""
    cfg = _cfg(tmp_path, 1, incremental=True)
    full = _cfg(tmp_path, 1, incremental=False)
    layout = CycleLayout(Namespace.of(cfg))
    rng = np.random.default_rng(5)
    ends = [START + CADENCE * k for k in range(1, 15)]
    for k, end in enumerate(ends[:-1]):
        _publish(layout, end, f"e{k:04d}cc", rng)
        assert partition_windows(cfg, layout, end, 0, "v1").rebuilt == (k == 0)
    layout.window_codes(ends[-3], 0).unlink()
    _publish(layout, ends[-1], "eeeeeeee", rng)
    got = partition_windows(cfg, layout, ends[-1], 0, "v1")
    assert got.rebuilt
    _same(got, partition_windows(full, layout, ends[-1], 0, "v1"))
    assert layout.window_codes(ends[-3], 0).is_file()  # written again by the rebuild


@pytest.mark.parametrize("partitions", [1, 8])
def test_writing_only_the_changed_users_rows_serves_what_writing_every_row_serves(
    tmp_path, partitions
) -> None:
    """A store that takes only the rows of the users whose sums an interval changed
    (:attr:`PartitionWindows.uagg_to_write`) holds, at every interval, for every user in
    the window: the recomputed row's sum and count, a row fresh under the uagg TTL, and a
    window that places each of the user's pair codes (the latest of each pair, as the pair
    view holds it) on the same side as the recomputed row's window (the test serving's mean
    without the item makes), taking fewer rows than every row every interval."""
    from solaris.orchestration.window_state import pair_history

    carried = _cfg(tmp_path, partitions, incremental=True)
    recomputed = _cfg(tmp_path, partitions, incremental=False)
    layout = CycleLayout(Namespace.of(carried))
    rng = np.random.default_rng(11)
    ttl = carried.store.uagg_ttl_seconds
    ends = [START + CADENCE * k for k in range(1, 41)]
    store: dict[int, tuple[bytes, int, int, int]] = {}  # user: z_sum, count, start, computed
    written = every = 0
    for k, end in enumerate(ends):
        _publish(layout, end, f"f{k:04d}ab", rng)
        if end == ends[30]:  # an interval inside the window is re-embedded
            _publish(layout, ends[27], "dddddddd", rng)
        history = pair_history(carried, end, len(ends) * CADENCE).pairs
        latest = history.sort_values("computed_at", kind="stable").drop_duplicates(
            ["user_id", "item_id"], keep="last"
        )
        latest = latest[latest["fm_version"] == "v1"]
        for partition in range(partitions):
            got = partition_windows(carried, layout, end, partition, "v1")
            want = partition_windows(recomputed, layout, end, partition, "v1").uagg
            rows = got.uagg_to_write
            for row in rows.itertuples(index=False):
                store[row.user_id] = (
                    np.asarray(row.z_sum).tobytes(),
                    row.count,
                    row.window_start,
                    int(row.event_ts.timestamp()),
                )
            written += len(rows)
            every += len(want)
            for row in want.itertuples(index=False):
                z_sum, count, start, computed = store[row.user_id]
                assert (z_sum, count) == (np.asarray(row.z_sum).tobytes(), row.count)
                assert end - ttl <= computed <= end
                codes = latest.loc[latest["user_id"] == row.user_id, "computed_at"].to_numpy()
                in_window = (codes > row.window_start) & (codes <= end)
                assert ((codes > start) & (codes <= computed) == in_window).all()
        remove_expired(carried, layout, end)
    assert written < every  # few users here: most change every interval


def test_every_row_is_written_when_the_uagg_ttl_is_shorter_than_its_window(tmp_path) -> None:
    """An unchanged row would expire before its codes leave the window: none is skipped."""
    cfg = _cfg(tmp_path, 1, incremental=True)
    cfg = cfg.model_copy(update={"store": cfg.store.model_copy(update={"uagg_ttl_hours": 1.0})})
    layout = CycleLayout(Namespace.of(cfg))
    rng = np.random.default_rng(13)
    for k in range(1, 6):
        _publish(layout, START + CADENCE * k, f"a{k:04d}cd", rng)
        got = partition_windows(cfg, layout, START + CADENCE * k, 0, "v1")
    assert not got.rebuilt
    assert got.uagg_changed is None and got.uagg_to_write is got.uagg
