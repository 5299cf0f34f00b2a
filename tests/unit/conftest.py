"""Fixtures shared by the unit tests of more than one package."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml


@pytest.fixture(scope="session")
def airflow_options() -> dict[str, dict[str, Any]]:
    """The installed Airflow's options by section: the core's and the Celery provider's
    (``[celery]``), as its config templates declare them."""
    spec = importlib.util.find_spec("airflow")
    assert spec is not None and spec.submodule_search_locations
    template = Path(next(iter(spec.submodule_search_locations))) / "config_templates/config.yml"
    sections = yaml.safe_load(template.read_text())
    from airflow.providers.celery.get_provider_info import get_provider_info

    sections.update(get_provider_info()["config"])
    return {name: section["options"] for name, section in sections.items()}
