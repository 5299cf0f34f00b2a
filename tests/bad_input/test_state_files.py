"""Lost or torn per-partition state files of the enrichment: each is refused by name, with
the task that needs it and how to recover, before the task writes anything.

The enrichment's tasks hand each other files: the mapped aggregates tasks write each
partition's item partial sums, user embeddings and fill codes; the reduction reads the
partials and the embeddings (it builds the neighbour index from them); every partition's
fill reads the index, the kept neighbour lists and every partition's fill codes. Before
these checks a lost or torn file surfaced as a raw ``ArrowInvalid``, ``FileNotFoundError``
or zip error, and a fill over several partitions wrote the first partitions' ``unn`` rows
before failing on a later file.

Each case corrupts one file of a real enrichment state (built once through the cycle's own
functions, on the suite's Redis) three ways, missing, cut to half its bytes and random bytes,
and checks the error names the file and that no Redis key of the project and no cycle or
offline file changed.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from solaris.config import SolarisConfig
from solaris.data.schemas import REQUEST_LOG_SCHEMA, pair_embeddings_schema
from solaris.namespace import Namespace
from solaris.orchestration.layout import CycleLayout, Interval
from solaris.orchestration.resources import CycleInputError

from .conftest import FM_VERSION, NOW, Z_DIM, FeastWorld

pytestmark = pytest.mark.integration

CADENCE = 900
AS_OF = NOW - NOW % CADENCE
PARTITIONS = 4
USERS = 40


def _cfg(world: FeastWorld, artifacts: Path) -> SolarisConfig:
    """The suite's store and project, four partitions, state under ``artifacts``."""
    base = world.cfg
    return base.model_copy(
        update={
            "artifacts_dir": artifacts,
            "cycle": base.cycle.model_copy(update={"partitions": PARTITIONS}),
        }
    )


def _publish(layout: CycleLayout, end: int, rng: np.random.Generator) -> None:
    """Interval ``end``'s codes as an embeddings run publishes them (one shard, its marker)."""
    interval = Interval(end - CADENCE, end)
    n = 120
    z = rng.standard_normal((n, Z_DIM)).astype(np.float32)
    table = pa.table(
        {
            "user_id": pa.array(rng.integers(0, USERS, n), pa.int64()),
            "item_id": pa.array(rng.integers(0, 10, n), pa.int64()),
            "z": pa.FixedSizeListArray.from_arrays(pa.array(z.reshape(-1)), Z_DIM),
            "fm_version": pa.array([FM_VERSION] * n, pa.string()),
            "computed_at": pa.array(np.full(n, end * 1_000_000), pa.timestamp("us", tz="UTC")),
        },
        schema=pair_embeddings_schema(Z_DIM),
    )
    generation = f"{end:x}"[-8:]
    shard = layout.embeddings(interval, 0, generation)
    shard.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, shard)
    layout.embeddings_done(interval).write_text(json.dumps({"generation": generation, "shards": 1}))


def _log_requests(layout: CycleLayout, end: int) -> None:
    """Every user asked for items 0 to 9 in interval ``end``: the fill's targets."""
    users = np.repeat(np.arange(USERS, dtype=np.int64), 10)
    n = len(users)
    table = pa.table(
        {
            "request_id": pa.array(np.arange(n), pa.int64()),
            "user_id": pa.array(users, pa.int64()),
            "item_id": pa.array(np.tile(np.arange(10), USERS), pa.int64()),
            "ts": pa.array(np.full(n, end - 1), pa.int64()),
            "label": pa.array([None] * n, pa.int8()),
            "score": pa.array(np.full(n, 0.5), pa.float32()),
        },
        schema=REQUEST_LOG_SCHEMA,
    )
    path = layout.request_log(Interval(end - CADENCE, end))
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


@dataclass
class Built:
    """Copies of one namespace's cycle folder, taken as the enrichment of ``AS_OF`` went:
    ``aggregated`` after the partitions' aggregates (partials, embeddings, fill codes),
    ``indexed`` after the reduction and the index, ``filled`` after the fill (kept lists)."""

    aggregated: Path
    indexed: Path
    filled: Path
    results: list[dict]


@pytest.fixture(autouse=True)
def _fm_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """The FM version the cycle writes (no autoencoder is trained here)."""
    monkeypatch.setattr("solaris.orchestration.enrichment.current_fm_version", lambda _: FM_VERSION)


@pytest.fixture(scope="module")
def built(feast_world: FeastWorld, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    from solaris.orchestration import enrichment

    tmp = tmp_path_factory.mktemp("enriched")
    cfg = _cfg(feast_world, tmp / "artifacts")
    layout = CycleLayout(Namespace.of(cfg))
    rng = np.random.default_rng(11)
    for end in (AS_OF - CADENCE, AS_OF):
        _publish(layout, end, rng)
    _log_requests(layout, AS_OF)
    copies = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(enrichment, "current_fm_version", lambda _: FM_VERSION)
        results = [enrichment.aggregate_partitions(cfg, AS_OF, range(PARTITIONS))]
        copies["aggregated"] = shutil.copytree(layout.root, tmp / "aggregated")
        enrichment.reduce_aggregates(cfg, AS_OF, results)
        enrichment.build_neighbour_index(cfg, AS_OF)
        copies["indexed"] = shutil.copytree(layout.root, tmp / "indexed")
        filled = enrichment.fill_partitions(cfg, AS_OF, range(PARTITIONS))
        copies["filled"] = shutil.copytree(layout.root, tmp / "filled")
    assert filled["unn_rows"] > 0 and filled["nbr_rows"] > 0  # a fill with work to spoil
    yield Built(results=results, **copies)


@pytest.fixture
def state(
    built: Built, feast_world: FeastWorld, tmp_path: Path
) -> Callable[[str], tuple[SolarisConfig, CycleLayout]]:
    """``state(stage)``: a fresh namespace folder holding the copy taken at ``stage``."""

    def make(stage: str) -> tuple[SolarisConfig, CycleLayout]:
        cfg = _cfg(feast_world, tmp_path / "artifacts")
        layout = CycleLayout(Namespace.of(cfg))
        shutil.copytree(getattr(built, stage), layout.root)
        return cfg, layout

    return make


def _spoil(path: Path, how: str) -> None:
    assert path.is_file(), path
    if how == "missing":
        path.unlink()
    elif how == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    else:
        path.write_bytes(np.random.default_rng(5).bytes(path.stat().st_size))


@pytest.fixture
def unchanged(
    feast_world: FeastWorld, snapshot_files, snapshot_redis
) -> Callable[[CycleLayout], Callable[[], None]]:
    """``unchanged(layout)`` snapshots the cycle folder, the offline files and the project's
    Redis keys; calling the result asserts none of them changed."""

    def take(layout: CycleLayout) -> Callable[[], None]:
        files = snapshot_files(layout.root, feast_world.data_dir / "offline")
        keys = snapshot_redis(feast_world.client, feast_world.key_pattern)
        before = files(), keys()

        def check() -> None:
            assert files() == before[0], "a cycle or offline file changed"
            assert keys() == before[1], "a Redis key changed"

        return check

    return take


CORRUPTIONS = ["missing", "truncated", "garbage"]


def _raises_naming(path: Path, *what: str) -> pytest.RaisesExc:
    """A :class:`CycleInputError` whose message names ``path``, then each of ``what``."""
    import re

    return pytest.raises(CycleInputError, match=".*".join(map(re.escape, (str(path), *what))))


@pytest.mark.parametrize("how", CORRUPTIONS)
@pytest.mark.parametrize("kind", ["item_partials", "user_embeddings"])
def test_the_reduction_refuses_a_lost_or_torn_partial_or_embedding_before_writing_iagg(
    state, unchanged, built, how, kind
) -> None:
    """Partition 3's item partial sums or user embeddings (the index is built from them
    right after): the reduction writes no ``iagg`` row and no run record."""
    from solaris.orchestration.enrichment import reduce_aggregates

    cfg, layout = state("aggregated")
    bad = getattr(layout, kind)(AS_OF, 3)
    _spoil(bad, how)
    check = unchanged(layout)
    word = "missing" if how == "missing" else "unreadable"
    with _raises_naming(bad, word, "Rerun", "partition_aggregates", "partition 3"):
        reduce_aggregates(cfg, AS_OF, built.results)
    check()


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_the_index_build_refuses_a_lost_or_torn_embedding_by_name(state, unchanged, how) -> None:
    from solaris.orchestration.enrichment import build_neighbour_index

    cfg, layout = state("aggregated")
    bad = layout.user_embeddings(AS_OF, 2)
    _spoil(bad, how)
    check = unchanged(layout)
    with _raises_naming(bad, "Rerun", "partition_aggregates", "partition 2"):
        build_neighbour_index(cfg, AS_OF)
    check()


@pytest.mark.parametrize("how", CORRUPTIONS)
@pytest.mark.parametrize("kind", ["fill_codes", "neighbour_index", "neighbour_lists"])
def test_a_fill_over_several_partitions_checks_every_file_before_its_first_write(
    state, unchanged, how, kind
) -> None:
    """A fill of partitions 0 to 3 with partition 3's fill codes, the index or partition
    3's kept neighbour lists lost or torn: refused naming the file before partition 0's
    ``unn`` or ``nbr`` rows are written. A lost kept-lists file is no error (the fill
    queries the partition's users again), so that case runs to its end."""
    from solaris.orchestration.enrichment import fill_partitions

    cfg, layout = state("filled" if kind == "neighbour_lists" else "indexed")
    bad = {
        "fill_codes": layout.fill_codes(AS_OF, 3),
        "neighbour_index": layout.neighbour_index(AS_OF),
        "neighbour_lists": layout.neighbour_lists(AS_OF, 3),
    }[kind]
    _spoil(bad, how)
    if kind == "neighbour_lists" and how == "missing":
        assert fill_partitions(cfg, AS_OF, range(PARTITIONS))["unn_rows"] > 0
        assert bad.is_file()  # kept anew
        return
    check = unchanged(layout)
    word = "missing" if how == "missing" else "unreadable"
    remedy = {
        "fill_codes": "Rerun the interval's partition_aggregates task holding partition 3",
        "neighbour_index": "Rerun the interval's aggregates task",
        "neighbour_lists": "Remove it",
    }[kind]
    with _raises_naming(bad, word, remedy, "nothing was written"):
        fill_partitions(cfg, AS_OF, range(PARTITIONS))
    check()


@pytest.mark.parametrize("how", ["truncated", "garbage"])
def test_a_torn_carried_window_state_is_rebuilt_not_raised(state, how) -> None:
    """The carried windows are derived state: a torn one is rebuilt from the codes (logged),
    whatever the tear, never a raw zip error."""
    from solaris.orchestration.enrichment import aggregate_partitions

    cfg, layout = state("aggregated")
    _spoil(layout.window_state(AS_OF, 1), how)
    later = AS_OF + CADENCE
    _publish(layout, later, np.random.default_rng(3))
    figures = aggregate_partitions(cfg, later, [1])
    assert figures["windows_rebuilt"] == 1


@pytest.mark.parametrize("how", ["truncated", "garbage"])
def test_a_fill_refuses_a_torn_request_log_before_its_first_write(state, unchanged, how) -> None:
    """The interval's request log (the candidates run drained it, so no rerun brings it
    back) torn: the fill names it and how to go on, before partition 0's ``unn`` rows."""
    from solaris.orchestration.enrichment import fill_partitions

    cfg, layout = state("indexed")
    bad = layout.request_log(Interval(AS_OF - CADENCE, AS_OF))
    _spoil(bad, how)
    check = unchanged(layout)
    with _raises_naming(bad, "unreadable", "Restore it", "nothing was written"):
        fill_partitions(cfg, AS_OF, range(PARTITIONS))
    check()
