"""The solaris_training_set DAG's task: its conf checked by name, then one library call."""

from __future__ import annotations

from typing import Any

import pytest

from solaris.orchestration import training_set
from solaris.orchestration.resources import CycleInputError
from solaris.serving import training_export
from solaris.serving.training_export import DEFAULT_CHUNK_ROWS, TrainingSetWritten


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    monkeypatch.delenv("SOLARIS_CONFIG", raising=False)
    monkeypatch.delenv("SOLARIS_NAMESPACE", raising=False)
    seen: list[dict[str, Any]] = []

    def fake(cfg, impressions, out, **kwargs) -> TrainingSetWritten:
        seen.append({"namespace": cfg.namespace, "impressions": impressions, "out": out, **kwargs})
        return TrainingSetWritten(
            out=out,
            namespace=cfg.namespace,
            fm_version=kwargs["fm_version"] or "fm-current",
            impressions=impressions,
            rows=3,
            chunks=1,
            chunk_rows=kwargs["chunk_rows"],
            files=("date=2023-11-14/part-00000.parquet",),
            seconds=0.25,
        )

    monkeypatch.setattr(training_export, "write_training_set", fake)
    return seen


def test_the_conf_reaches_the_library_call_and_the_record_comes_back(calls) -> None:
    record = training_set.write_task(
        {"namespace": "replay_1", "impressions": "/x/imp", "out": "/x/out", "chunk_rows": 9}
    )
    assert calls == [
        {
            "namespace": "replay_1",
            "impressions": "/x/imp",
            "out": "/x/out",
            "fm_version": None,
            "chunk_rows": 9,
            "overwrite": False,
        }
    ]
    assert record["rows"] == 3 and record["seconds"] == 0.25 and record["namespace"] == "replay_1"


def test_defaults_are_the_settings_namespace_and_the_default_chunk(calls) -> None:
    training_set.write_task(
        {"impressions": "a", "out": "b", "chunk_rows": None, "overwrite": None, "namespace": None}
    )
    assert calls[0]["namespace"] == "live" and calls[0]["chunk_rows"] == DEFAULT_CHUNK_ROWS


@pytest.mark.parametrize(
    ("conf", "named"),
    [
        (None, "impressions"),
        ({"out": "b"}, "impressions"),
        ({"impressions": "a"}, "out"),
        ({"impressions": "a", "out": ""}, "out"),
        ({"impressions": "a", "out": "b", "chunk_rows": 0}, "chunk_rows"),
        ({"impressions": "a", "out": "b", "chunk_rows": True}, "chunk_rows"),
        ({"impressions": "a", "out": "b", "overwrite": "yes"}, "overwrite"),
        ({"impressions": "a", "out": "b", "fm_version": 3}, "fm_version"),
        ({"impressions": "a", "out": "b", "namespace": "Bad Name"}, "namespace"),
        ({"impressions": "a", "out": "b", "interval_end": 5}, "unknown conf keys"),
    ],
)
def test_a_bad_conf_is_refused_by_name_before_any_call(calls, conf, named: str) -> None:
    with pytest.raises(CycleInputError, match=named):
        training_set.write_task(conf)
    assert calls == []
