"""CycleLayout: which codes an interval's marker puts in force, and which runs may publish."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from solaris.namespace import Namespace
from solaris.orchestration.layout import CycleLayout, Interval

A = Interval(0, 900)


@pytest.fixture(params=["local", "memory"])
def layout(request, tmp_path: Path):
    """A layout on a folder, and on fsspec's in-process memory filesystem."""
    import uuid

    from solaris.files import remove_tree, state_path

    if request.param == "local":
        yield CycleLayout(Namespace("t", tmp_path, tmp_path))
        return
    root = f"memory://solaris-layout-{uuid.uuid4().hex[:8]}"
    yield CycleLayout(Namespace("t", tmp_path, tmp_path, state_uri=root))
    remove_tree(state_path(root))


def _write(path, text: str = "x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_marker_names_the_generation_and_counts_its_files(layout) -> None:
    _write(layout.plan(A, "aaaaaa"), json.dumps({"generation": "aaaaaa", "shards": 2}))
    _write(layout.embeddings_done(A), json.dumps({"generation": "aaaaaa", "shards": 2}))

    codes = layout.published_codes(A)
    assert codes.generation == "aaaaaa" and str(codes.folder) == str(
        layout.embeddings_dir(A, "aaaaaa")
    )
    assert [p.name for p in codes.files] == ["shard-0000.parquet", "shard-0001.parquet"]
    assert layout.published_generation(A) == "aaaaaa"
    assert layout.staged_generations(A) == []  # the published one is not staged


def test_no_marker_means_no_codes(layout) -> None:
    assert layout.published_codes(A) is None and layout.codes_dir(A) is None


def test_an_empty_marker_is_a_folder_of_codes_from_before_generations(layout) -> None:
    folder = layout.embeddings_done(A).parent
    for k in (1, 0):
        _write(folder / f"shard-{k:04d}.parquet")
    _write(layout.embeddings_done(A), "")

    codes = layout.published_codes(A)
    assert codes.generation is None and str(codes.folder) == str(folder)
    assert [p.name for p in codes.files] == ["shard-0000.parquet", "shard-0001.parquet"]


@pytest.mark.parametrize(
    "text", ["{", '{"generation": "../x", "shards": 1}', '{"generation": "aaaaaa", "shards": -1}']
)
def test_an_unreadable_marker_is_an_error_naming_it(layout, text: str) -> None:
    _write(layout.embeddings_done(A), text)
    with pytest.raises(ValueError, match="_SUCCESS: not a completion marker"):
        layout.published_codes(A)


def test_only_a_generation_with_its_plan_in_may_be_published(layout) -> None:
    _write(layout.shard(A, 0, "bbbbbb"))  # a plan cut short, or a removal under way
    _write(layout.embeddings(A, 0, "cccccc"))
    _write(layout.plan(A, "cccccc"), json.dumps({"generation": "cccccc", "shards": 1}))

    assert layout.generations(A) == ["bbbbbb", "cccccc"]
    assert layout.staged_generations(A) == ["cccccc"]


def test_a_marker_of_partitions_names_the_shards_that_hold_each_partition(layout) -> None:
    marker = {
        "generation": "aaaaaa",
        "shards": 3,
        "partitions": 4,
        "coverage": [[0, 1], [2, 2], [2, 3]],
        "rows": [5, 7, 2],
    }
    _write(layout.embeddings_done(A), json.dumps(marker))
    codes = layout.published_codes(A)
    assert codes.coverage == ((0, 1), (2, 2), (2, 3)) and codes.rows == (5, 7, 2)
    names = lambda files: [f.name for f in files]  # noqa: E731
    files, mixed = codes.files_of(0, 4)
    assert names(files) == ["shard-0000.parquet"] and mixed  # shared with partition 1
    files, mixed = codes.files_of(2, 4)
    assert names(files) == ["shard-0001.parquet", "shard-0002.parquet"] and mixed
    # Read with another partition count: every shard, filtered.
    assert codes.files_of(1, 8) == (codes.files, True)


@pytest.mark.parametrize(
    "extra",
    [
        {"partitions": 4, "coverage": [[0, 1], [2, 4]]},  # beyond the count
        {"partitions": 4, "coverage": [[1, 0], [2, 3]]},  # backwards
        {"partitions": 4, "coverage": [[0, 3]]},  # one range for two shards
        {"partitions": 0, "coverage": [[0, 0], [0, 0]]},
        {"partitions": 4, "coverage": [[0, 1], [2, 3]], "rows": [1]},
    ],
)
def test_an_inconsistent_partition_marker_is_an_error_naming_it(layout, extra) -> None:
    _write(layout.embeddings_done(A), json.dumps({"generation": "aaaaaa", "shards": 2, **extra}))
    with pytest.raises(ValueError, match="not a completion marker"):
        layout.published_codes(A)


def test_an_intervals_request_log_is_one_file_or_a_file_per_partition(layout) -> None:
    _write(layout.request_log(A))
    assert layout.interval_files("request_log", A) == ((layout.request_log(A),), False)
    assert layout.interval_files("request_log", A, 3) == ((layout.request_log(A),), True)
    B = Interval(900, 1_800)
    assert not layout.has_interval("selections", B)
    for k in (0, 2):
        _write(layout.selections(B, k))
    assert layout.has_interval("selections", B)
    assert layout.interval_files("selections", B) == (
        (layout.selections(B, 0), layout.selections(B, 2)),
        False,
    )
    assert layout.interval_files("selections", B, 2) == ((layout.selections(B, 2),), False)
    assert layout.interval_files("selections", B, 1) == ((), False)
    assert [i.key for i in layout.intervals("selections", ending_after=0, ending_by=2_000)] == [
        B.key
    ]


def test_a_live_run_marks_the_namespace_and_later_replays_or_a_corrupt_record_keep_it(
    layout,
) -> None:
    from solaris.orchestration.layout import write_run_record

    assert layout.live_run_record() is None
    write_run_record(layout, "solaris_candidates", "00000000000-00000000900", {"replay": True})
    assert layout.live_run_record() is None  # a replay's record marks nothing
    write_run_record(layout, "solaris_candidates", "00000000900-00000001800", {"replay": False})
    assert layout.live_run_record() == layout.live_marker
    # A forced replay's newer records, and a newest record that cannot be read, used to hide
    # the live run from a check that read only each DAG's newest record.
    write_run_record(layout, "solaris_candidates", "00000001800-00000002700", {"replay": True})
    _write(layout.run_record("solaris_embeddings", "00000009000-00000009900"), "{not json")
    assert layout.live_run_record() == layout.live_marker
