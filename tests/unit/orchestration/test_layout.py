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
