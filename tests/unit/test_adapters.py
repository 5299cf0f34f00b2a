"""The adapter interfaces: loading by import path, clear errors, the default verifier, and a
cycle library that imports no MovieLens code."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from solaris.adapters import (
    AdapterError,
    FoundationModel,
    LoggedScores,
    TrafficSource,
    foundation_model,
    load,
    logged_scores,
    traffic_source,
    verifier_trainer,
)
from solaris.config import SolarisConfig
from solaris.errors import ConfigError

CFG = SolarisConfig()


def test_logged_scores_are_the_default_verifier_and_missing_ones_rank_last() -> None:
    verifier = load(CFG.model.verifier, CFG, type(logged_scores(CFG)), "model.verifier")
    assert isinstance(verifier, LoggedScores)
    rows = pd.DataFrame({"score": np.array([0.5, np.nan, 0.25], np.float32)})
    assert verifier.score(rows).tolist() == [0.5, -np.inf, 0.25]


def test_a_class_is_its_own_factory() -> None:
    assert isinstance(load("solaris.adapters:LoggedScores", CFG, LoggedScores, "v"), LoggedScores)


def test_logged_scores_without_a_score_column_say_what_to_do() -> None:
    with pytest.raises(AdapterError, match="log_request"):
        LoggedScores().score(pd.DataFrame({"user_id": [1]}))


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("nocolon", "not an import path"),
        ("solaris.no_such_module:build", "cannot import"),
        ("solaris.adapters:no_such_factory", "cannot import"),
        ("solaris.adapters:logged_scores", "not a FoundationModel .missing: features, shared"),
        ("solaris.adapters:load", "failed to build: TypeError"),
    ],
)
def test_a_bad_adapter_is_an_error_naming_the_setting(path: str, message: str) -> None:
    with pytest.raises(AdapterError, match=f"model.foundation: .*{message}"):
        load(path, CFG, FoundationModel, "model.foundation")


@pytest.mark.parametrize(
    ("build", "setting", "choice"),
    [
        (foundation_model, "model.foundation", "solaris.examples.synthetic:foundation_model"),
        (traffic_source, "requests.source", "solaris.examples.movielens:traffic"),
    ],
)
def test_an_unset_adapter_is_a_config_error_naming_the_setting_and_the_choices(
    build, setting: str, choice: str
) -> None:
    """The product runs no example by default: a missing FM or traffic source is refused
    with the setting, the documented examples and how to set it."""
    section, name = setting.split(".")
    with pytest.raises(ConfigError, match=setting) as caught:
        build(SolarisConfig())
    assert choice in str(caught.value)
    assert f"SOLARIS_{section.upper()}__{name.upper()}" in str(caught.value)
    assert verifier_trainer(SolarisConfig()) is None  # no trainer: the training DAG skips


def test_the_movielens_traffic_source_satisfies_the_protocol(tmp_path) -> None:
    from solaris.examples.movielens.adapters import traffic

    assert isinstance(traffic(SolarisConfig(artifacts_dir=tmp_path)), TrafficSource)


def test_the_cycle_library_imports_no_movielens_code() -> None:
    """Everything the DAGs, serving and the store run imports no MovieLens module: a user's
    own FM and traffic come in through the adapters only."""
    modules = [
        "solaris.adapters",
        "solaris.orchestration.candidates",
        "solaris.orchestration.embeddings",
        "solaris.orchestration.enrichment",
        "solaris.orchestration.clustering",
        "solaris.orchestration.training",
        "solaris.pipeline.embed",
        "solaris.pipeline.codes",
        "solaris.pipeline.select",
        "solaris.pipeline.enrich",
        "solaris.pipeline.materialize",
        "solaris.serving.client",
        "solaris.serving.request_log",
        "solaris.store.online",
        "solaris.local.cycle",
    ]
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "bad = [m for m in sys.modules if 'movielens' in m]\n"
        "print(sorted(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("raise RuntimeError('no GPU here')", "cannot import .*RuntimeError: no GPU here"),
        ("def broken(:\n    pass", "cannot import .*SyntaxError"),
        ("raise SystemExit(3)", "cannot import .*SystemExit: 3"),
        ("import sys\ndef build(cfg):\n    sys.exit('bye')", ".* failed to build: SystemExit: bye"),
    ],
    ids=["runtime-error", "syntax-error", "system-exit", "exit-in-the-factory"],
)
def test_an_adapter_module_that_fails_or_exits_is_an_adapter_error(
    body: str, message: str, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drill's cases: each escaped as itself (a SystemExit ended the worker quietly)."""
    import uuid

    name = f"adapter_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(body + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(AdapterError, match=f"model.foundation: {message}"):
        load(f"{name}:build", CFG, FoundationModel, "model.foundation")


def test_a_traffic_source_without_a_column_is_an_adapter_error_naming_it(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drill's case: a source without ``score`` ended in a pandas KeyError in a task."""
    import uuid

    from solaris.adapters import traffic_requests
    from solaris.config import RequestLogConfig

    name = f"traffic_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "import pandas as pd\n"
        "class Source:\n"
        "    def __init__(self, cfg):\n        pass\n"
        "    def requests(self, start, end):\n"
        "        return pd.DataFrame({'request_id': [1], 'user_id': [2], 'item_id': [3],\n"
        "                             'ts': [start], 'label': [None]})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = CFG.model_copy(update={"requests": RequestLogConfig(source=f"{name}:Source")})
    with pytest.raises(AdapterError, match=rf"requests.source: '{name}:Source' gave requests "
                       r"without the columns \['score'\]"):  # fmt: skip
        traffic_requests(cfg, 0, 900)
