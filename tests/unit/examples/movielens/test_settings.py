"""The MovieLens example's adapter settings: filled in where none is named, kept where one
is, and the same in every deployment file that runs the example."""

from __future__ import annotations

from pathlib import Path

import yaml

from solaris.config import SolarisConfig
from solaris.examples.movielens.settings import ADAPTERS, environment, with_adapters

REPO = Path(__file__).resolve().parents[4]


def test_the_examples_adapters_fill_only_what_the_settings_leave_unset() -> None:
    filled = with_adapters(SolarisConfig())
    assert filled.model.foundation == ADAPTERS["model"]["foundation"]
    assert filled.model.trainer == ADAPTERS["model"]["trainer"]
    assert filled.requests.source == ADAPTERS["requests"]["source"]
    own = SolarisConfig(model={"foundation": "mypkg.fm:build"}, requests={"source": "mypkg:t"})
    kept = with_adapters(own)
    assert kept.model.foundation == "mypkg.fm:build" and kept.requests.source == "mypkg:t"
    assert kept.model.trainer == ADAPTERS["model"]["trainer"]
    assert with_adapters(filled) is filled


def test_the_variables_set_the_same_adapters(monkeypatch) -> None:
    for name, value in environment().items():
        monkeypatch.setenv(name, value)
    assert SolarisConfig.load() == with_adapters(SolarisConfig())


def test_compose_and_helm_name_the_examples_adapters() -> None:
    """The deployment files run the example: they set its adapters, and the same ones."""
    compose = yaml.safe_load((REPO / "docker" / "compose.yaml").read_text())
    common = compose["x-airflow-common"]["environment"]
    helm = yaml.safe_load((REPO / "deploy" / "helm" / "values.yaml").read_text())
    helm_env = {entry["name"]: entry.get("value") for entry in helm["env"]}
    for name, value in environment().items():
        assert common[name] == f"${{{name}:-{value}}}"
        assert helm_env[name] == value
