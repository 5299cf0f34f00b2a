"""The embeddings DAG keeps its work queue in the cycle's own state."""

from __future__ import annotations

import pandas as pd

from solaris.config import SolarisConfig
from solaris.namespace import Namespace
from solaris.orchestration.embeddings import work_intervals
from solaris.orchestration.layout import CycleLayout, Interval
from solaris.orchestration.resources import write_parquet


def test_an_earlier_selection_left_without_codes_is_embedded_by_the_next_run(tmp_path) -> None:
    cfg = SolarisConfig(namespace="t_emb", artifacts_dir=tmp_path)
    layout = CycleLayout(Namespace.of(cfg))
    done, lost, now = Interval(0, 900), Interval(900, 1_800), Interval(1_800, 2_700)
    for interval in (done, lost, now):
        write_parquet(pd.DataFrame({"user_id": [1]}), layout.selections(interval))
    layout.embeddings_done(done).parent.mkdir(parents=True)
    layout.embeddings_done(done).touch()
    # The event of `lost` never came (or its run failed): the run for `now` takes it too.
    assert work_intervals(cfg, [now]) == [lost, now]
    # Nothing later than the run's own intervals is taken ahead of its event.
    assert work_intervals(cfg, [lost]) == [lost]


def _ledger(seed: int, n: int = 400) -> pd.DataFrame:
    """A selection ledger with some pairs selected twice (two requests of one user)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    ledger = pd.DataFrame(
        {
            "request_id": np.arange(n),
            "user_id": rng.integers(0, 60, n),
            "item_id": rng.integers(0, 30, n),
            "ts": np.sort(rng.integers(0, 900, n)),
            "label": rng.integers(0, 2, n).astype("int8"),
        }
    )
    return pd.concat([ledger, ledger.iloc[::7]], ignore_index=True)  # repeats


def _shards(cfg: SolarisConfig, interval: Interval) -> tuple[list[pd.DataFrame], list]:
    """Plan ``interval`` and read its shards back: (frames, the plan's coverage)."""
    from solaris.orchestration.embeddings import plan_shards
    from solaris.orchestration.resources import read_parquet

    layout = CycleLayout(Namespace.of(cfg))
    shards = plan_shards(cfg, [interval])
    frames = [read_parquet(layout.shard(interval, s.index, s.generation)) for s in shards]
    return frames, [list(s.partitions) for s in shards]


def _write_partition_files(cfg: SolarisConfig, interval: Interval, ledger, count: int) -> None:
    """The ledger as ``select_partitions`` writes it under ``count`` partitions."""
    from solaris.store.partitions import Partitioning

    layout = CycleLayout(Namespace.of(cfg))
    parts = Partitioning(count)
    for p, rows in enumerate(parts.split(ledger["user_id"].to_numpy())):
        if len(rows):
            path = layout.selections(interval).parent / interval.key / f"{p:05d}.parquet"
            write_parquet(ledger.iloc[rows].reset_index(drop=True), path)


def test_the_plan_of_partition_files_read_one_at_a_time_is_the_plan_of_one_ledger(
    tmp_path,
) -> None:
    """Shards from the partitions' files (read a file at a time) are those of one file of
    the whole interval; files of another partition count (read together) give the same
    pairs in shards of the same partitions."""
    ledger = _ledger(0)
    interval = Interval(0, 900)
    plans = []
    for k, written_under in enumerate((None, 8, 3)):
        cfg = SolarisConfig(
            namespace=f"t_plan{k}",
            artifacts_dir=tmp_path / str(k),
            cycle={"partitions": 8, "shard_rows": 25},
        )
        if written_under is None:
            write_parquet(ledger, CycleLayout(Namespace.of(cfg)).selections(interval))
        else:
            _write_partition_files(cfg, interval, ledger, written_under)
        plans.append(_shards(cfg, interval))
    (whole, coverage), (files, files_coverage), (other, other_coverage) = plans
    distinct = ledger.drop_duplicates(["user_id", "item_id"])
    assert sum(len(f) for f in whole) == len(distinct)
    assert len(whole) > 8  # busy partitions are cut into several shards
    assert files_coverage == other_coverage == coverage
    for a, b in zip(whole, files, strict=True):
        pd.testing.assert_frame_equal(a, b)

    def pairs(frames):
        return pd.concat(frames).sort_values(["user_id", "item_id"], ignore_index=True)

    pd.testing.assert_frame_equal(pairs(other), pairs(whole))


def test_ledger_files_repeating_pairs_across_files_give_shards_true_to_their_partitions(
    tmp_path,
) -> None:
    """A stale file left by a larger partition count repeats pairs of another file: the
    pairs are counted once, and every shard holds only the partitions its plan names."""
    from solaris.store.partitions import Partitioning

    ledger = _ledger(1)
    interval = Interval(0, 900)
    cfg = SolarisConfig(
        namespace="t_stale", artifacts_dir=tmp_path, cycle={"partitions": 4, "shard_rows": 25}
    )
    _write_partition_files(cfg, interval, ledger, 3)
    stale = CycleLayout(Namespace.of(cfg)).selections(interval).parent / interval.key
    write_parquet(ledger.iloc[:40].reset_index(drop=True), stale / "00007.parquet")
    frames, coverage = _shards(cfg, interval)
    assert sum(len(f) for f in frames) == len(ledger.drop_duplicates(["user_id", "item_id"]))
    parts = Partitioning(4)
    for frame, (first, last) in zip(frames, coverage, strict=True):
        held = parts.of(frame["user_id"].to_numpy())
        assert ((held >= first) & (held <= last)).all()


def test_a_busy_interval_is_planned_within_the_mapped_task_cap(tmp_path) -> None:
    """Rows that need more shards of ``cycle.shard_rows`` than ``cycle.max_mapped_tasks``
    give bigger shards, at most the cap, holding every pair once."""
    ledger = _ledger(3, n=2_000)
    interval = Interval(0, 900)
    distinct = len(ledger.drop_duplicates(["user_id", "item_id"]))
    for cap in (None, 5):
        cycle = {"partitions": 8, "shard_rows": 20} | ({"max_mapped_tasks": cap} if cap else {})
        cfg = SolarisConfig(namespace="t_cap", artifacts_dir=tmp_path / str(cap), cycle=cycle)
        write_parquet(ledger, CycleLayout(Namespace.of(cfg)).selections(interval))
        frames, _ = _shards(cfg, interval)
        assert sum(len(f) for f in frames) == distinct
        if cap is None:  # the default cap (256) leaves shards of shard_rows: more than 5
            assert len(frames) > 5 and max(len(f) for f in frames) <= 20
        else:
            assert len(frames) <= cap
            assert max(len(f) for f in frames) > 20


def test_a_cap_above_airflows_map_length_is_refused_by_name_before_any_write(
    tmp_path, monkeypatch
) -> None:
    """Under Airflow, a ``cycle.max_mapped_tasks`` above ``[core] max_map_length`` fails
    the plan with an error naming both, whatever the interval's rows, and nothing is
    written: Airflow would otherwise refuse the first busy interval at run time."""
    import pytest

    pytest.importorskip("airflow")
    from solaris.orchestration.embeddings import plan
    from solaris.orchestration.resources import PlanError

    monkeypatch.setenv("AIRFLOW__CORE__MAX_MAP_LENGTH", "64")
    cfg = SolarisConfig(
        namespace="t_refuse", artifacts_dir=tmp_path, cycle={"max_mapped_tasks": 100}
    )
    interval = Interval(0, 900)
    layout = CycleLayout(Namespace.of(cfg))
    write_parquet(_ledger(4), layout.selections(interval))
    before = sorted(p for p in tmp_path.rglob("*"))
    monkeypatch.setenv("SOLARIS_ARTIFACTS_DIR", str(tmp_path))
    monkeypatch.setenv("SOLARIS_CYCLE__MAX_MAPPED_TASKS", "100")
    conf = {"namespace": "t_refuse", **interval.as_dict()}
    with pytest.raises(PlanError, match=r"cycle.max_mapped_tasks = 100 .* max_map_length = 64"):
        plan(conf)
    assert sorted(p for p in tmp_path.rglob("*")) == before
    monkeypatch.setenv("AIRFLOW__CORE__MAX_MAP_LENGTH", "1024")
    assert len(plan(conf)) == 1  # the same run within the limit
