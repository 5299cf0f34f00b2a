"""An embeddings rerun never loses finished work (the synthetic FM, real Redis and Feast).

The drill this reproduces: a run naming intervals ``[A, B]``, where ``B`` has no selection
ledger, wiped the finished interval ``A`` (codes, marker and offline rows) before failing
on ``B``. Every interval is now validated before anything is touched, and a rerun's codes
are staged and swapped in only once complete.

Each test runs twice: with the cycle state in a local folder, and in a bucket of the local
S3 endpoint (``cycle.state_uri = s3://...``), where nothing can be renamed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from solaris.config import SolarisConfig
from solaris.model_versions import pin_version, versions
from solaris.namespace import Namespace
from solaris.orchestration.embeddings import (
    embed_and_materialize,
    plan_shards,
    summarize_embeddings,
)
from solaris.orchestration.layout import CycleLayout, Interval
from solaris.orchestration.resources import CycleInputError, write_parquet
from solaris.store.feast_store import delete_project_keys
from solaris.store.keys import project_pattern

pytestmark = pytest.mark.integration

HOURS_6 = 6 * 3600


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthetic example's log and FM, and an autoencoder trained on its ``h``."""
    from solaris.examples.synthetic import SyntheticWorld, prepare
    from solaris.pipeline.codes import fit_autoencoder_from_traffic

    cfg = _cfg(tmp_path_factory.mktemp("models"), "models", Path("unused"), "unused")
    prepare(cfg)
    start = SyntheticWorld().spec.start_ts
    fit_autoencoder_from_traffic(cfg, start, start + 4 * HOURS_6, max_pairs=2_000)
    return Path(cfg.artifacts_dir)


def _cfg(artifacts: Path, namespace: str, repo: Path, redis: str, **cycle) -> SolarisConfig:
    made = SolarisConfig(
        namespace=namespace,
        artifacts_dir=artifacts,
        model={
            "foundation": "solaris.examples.synthetic:foundation_model",
            "trainer": None,
            "z_dim": 8,
        },
        requests={"source": "solaris.examples.synthetic:traffic"},
        store={"redis": redis, "repo_path": repo},
        train={"ae_epochs": 1},
        cycle=cycle,
    )
    # The module's models were trained once: every namespace of the module reads them.
    root = Namespace.of(made).models_root
    if versions(root):
        pin_version(root, namespace, versions(root)[-1], live=None)
    return made


@pytest.fixture(params=["local", "s3"])
def cfg(request, models, repo_copy, feast_project, redis_connection, redis_client) -> Iterator:
    """Settings on the prepared models, the test's repo copy, project and Redis database;
    the cycle state in the models' folder, or in a fresh S3 bucket."""
    state = {}
    if request.param == "s3":
        state["state_uri"] = f"{request.getfixturevalue('s3_bucket')}/state"
    made = _cfg(models, feast_project, repo_copy, redis_connection, shard_rows=40, **state)
    if request.param == "s3":
        assert not Namespace.of(made).cycle_root.exists()
    yield made
    delete_project_keys(redis_client, feast_project)


def _interval(k: int) -> Interval:
    from solaris.examples.synthetic import SyntheticWorld

    start = SyntheticWorld().spec.start_ts + k * HOURS_6
    return Interval(start, start + HOURS_6)


def _write_ledger(cfg: SolarisConfig, interval: Interval, pairs: int = 100) -> None:
    from solaris import adapters

    rows = adapters.traffic_source(cfg).requests(interval.start, interval.end)
    ledger = rows.drop_duplicates(["user_id", "item_id"]).head(pairs)
    columns = ["request_id", "user_id", "item_id", "ts", "label"]
    write_parquet(
        ledger[columns].reset_index(drop=True), CycleLayout(Namespace.of(cfg)).selections(interval)
    )


def _run(cfg: SolarisConfig, intervals: list[Interval]) -> dict:
    """The embeddings DAG's three steps, in one process."""
    shards = plan_shards(cfg, intervals)
    done = [embed_and_materialize(cfg, shard) for shard in shards]
    return summarize_embeddings(cfg, intervals, done)


def _snapshot(cfg: SolarisConfig, redis_client) -> dict:
    """Every file of the namespace (cycle state and offline rows) and every Redis key."""
    namespace = Namespace.of(cfg)
    files = {
        str(p): p.read_bytes()
        for root in (namespace.cycle_root, namespace.offline_root)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }
    keys = {
        key: redis_client.dump(key)
        for key in sorted(redis_client.scan_iter(match=project_pattern(namespace.project)))
    }
    return {"files": files, "redis": keys}


def test_a_run_naming_an_interval_without_a_ledger_leaves_finished_intervals_untouched(
    cfg, redis_client
) -> None:
    a, b = _interval(0), _interval(1)
    _write_ledger(cfg, a)
    _run(cfg, [a])
    layout = CycleLayout(Namespace.of(cfg))
    assert layout.embeddings_done(a).is_file()
    before = _snapshot(cfg, redis_client)
    assert any("pair_embeddings" in f for f in before["files"]) and before["redis"]

    with pytest.raises(CycleInputError, match=f"interval {b.key}: no selection ledger"):
        plan_shards(cfg, [a, b])
    after = _snapshot(cfg, redis_client)
    assert after["files"].keys() == before["files"].keys()
    assert after == before  # byte-identical files, unchanged Redis keys and values


def test_a_rerun_swaps_its_codes_in_only_once_every_shard_is_in(cfg, redis_client) -> None:
    from solaris.data.schemas import read_table

    a = _interval(0)
    _write_ledger(cfg, a)
    first = _run(cfg, [a])
    assert first["shards"] == 3  # 100 pairs in shards of 40
    layout = CycleLayout(Namespace.of(cfg))
    published = layout.codes_dir(a)
    finished = {p.name: p.read_bytes() for p in published.iterdir()}
    assert sorted(finished) == ["_PLAN.json", *(f"shard-{k:04d}.parquet" for k in range(3))]

    # The rerun cuts one shard: planned, then published before its shard is embedded.
    rerun = cfg.model_copy(update={"cycle": cfg.cycle.model_copy(update={"shard_rows": 500})})
    shards = plan_shards(rerun, [a])
    assert len(shards) == 1
    assert layout.codes_dir(a) == published
    assert {p.name: p.read_bytes() for p in published.iterdir()} == finished
    with pytest.raises(CycleInputError, match=r"shards \[0\] .* have no codes"):
        summarize_embeddings(rerun, [a], [])
    assert layout.codes_dir(a) == published  # the marker still names the finished codes
    assert {p.name: p.read_bytes() for p in published.iterdir()} == finished
    assert layout.embedded_intervals(ending_after=-1, ending_by=a.end) == [a]

    done = [embed_and_materialize(rerun, shard) for shard in shards]
    summarize_embeddings(rerun, [a], done)
    swapped = layout.codes_dir(a)
    assert swapped.name == shards[0].generation and not published.exists()
    assert sorted(p.name for p in swapped.iterdir()) == ["_PLAN.json", "shard-0000.parquet"]
    assert read_table(swapped, "pair_embeddings", z_dim=8).num_rows == 100
    assert layout.staged_generations(a) == []
    # Only the generation in force is left, of the codes and of the shards.
    assert [p.name for p in (layout.root / "shards" / a.key).iterdir()] == [swapped.name]
    assert {p.name for p in swapped.parent.iterdir()} == {"_SUCCESS", swapped.name}
    assert list(layout.root.rglob(".*")) == []  # no hidden temp file is left
    offline = Namespace.of(cfg).offline_root / "pair"
    batches = sorted(p.name for p in offline.rglob("*.parquet"))
    assert batches == [f"batch-{a.key}-shard-0000.parquet"]  # the old cut's extra shards went
    table = pd.concat(pd.read_parquet(p) for p in offline.rglob("*.parquet"))
    assert len(table) == 100
    # A retried publish finds the work swapped in already and changes nothing.
    published = {p.name: p.read_bytes() for p in swapped.parent.rglob("*") if p.is_file()}
    assert summarize_embeddings(rerun, [a], done)["fm_passes"] == 100
    assert {p.name: p.read_bytes() for p in swapped.parent.rglob("*") if p.is_file()} == published


def test_a_publish_cut_short_while_removing_the_old_codes_is_finished_by_its_retry(
    cfg, redis_client
) -> None:
    a = _interval(0)
    _write_ledger(cfg, a)
    _run(cfg, [a])
    layout = CycleLayout(Namespace.of(cfg))
    old = layout.published_generation(a)
    rerun = cfg.model_copy(update={"cycle": cfg.cycle.model_copy(update={"shard_rows": 500})})
    shards = plan_shards(rerun, [a])
    done = [embed_and_materialize(rerun, shard) for shard in shards]
    summarize_embeddings(rerun, [a], done)
    new = layout.published_generation(a)
    # What a kill during the removal leaves: the old codes without their plan (it goes first).
    from solaris.files import atomic_write_bytes

    atomic_write_bytes(layout.embeddings(a, 0, old), b"left over")
    atomic_write_bytes(layout.shard(a, 0, old), b"left over")
    assert layout.staged_generations(a) == []  # never a candidate to publish again

    assert summarize_embeddings(rerun, [a], done)["fm_passes"] == 100  # the retry
    assert layout.published_generation(a) == new
    assert layout.generations(a) == [new]


def test_codes_written_before_generations_are_read_and_then_replaced(cfg, redis_client) -> None:
    from solaris.files import atomic_write_bytes, remove_tree
    from solaris.orchestration.enrichment import pair_history

    a = _interval(0)
    _write_ledger(cfg, a)
    _run(cfg, [a])
    layout = CycleLayout(Namespace.of(cfg))
    # The layout of the previous SOLARIS: the codes in the interval's folder, an empty marker.
    generation = layout.published_generation(a)
    folder = layout.embeddings_done(a).parent
    for k in range(3):
        atomic_write_bytes(
            folder / f"shard-{k:04d}.parquet", layout.embeddings(a, k, generation).read_bytes()
        )
        atomic_write_bytes(
            layout.root / "shards" / a.key / f"shard-{k:04d}.parquet",
            layout.shard(a, k, generation).read_bytes(),
        )
    remove_tree(layout.embeddings_dir(a, generation))
    remove_tree(layout.shards_dir(a, generation))
    atomic_write_bytes(layout.embeddings_done(a), b"")

    assert len(pair_history(cfg, a.end, HOURS_6).pairs) == 100

    rerun = cfg.model_copy(update={"cycle": cfg.cycle.model_copy(update={"shard_rows": 500})})
    shards = plan_shards(rerun, [a])
    summarize_embeddings(rerun, [a], [embed_and_materialize(rerun, s) for s in shards])
    assert layout.published_generation(a) == shards[0].generation
    assert not list(folder.glob("shard-*.parquet"))
    assert not list((layout.root / "shards" / a.key).glob("shard-*.parquet"))
    assert len(pair_history(cfg, a.end, HOURS_6).pairs) == 100
