"""The public surface is pinned: what an adopter imports from ``solaris``, ``solaris.config``,
``solaris.serving``, ``solaris.adapters``, ``solaris.store`` and ``solaris.errors``, and
the guides' code imports nothing else. A change to a list here is a change of the API."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SURFACE = {
    "solaris": ["__version__"],
    "solaris.serving": [
        "TIERS",
        "SolarisFeatures",
        "TierFeatures",
        "assemble_tiers",
        "build_training_set",
        "current_fm_version",
        "read_training_set",
        "write_training_set",
    ],
    "solaris.adapters": [
        "IMPORT_PATH",
        "AdapterError",
        "FoundationModel",
        "LoggedScores",
        "TrafficSource",
        "Verifier",
        "VerifierTrainer",
        "foundation_model",
        "load",
        "logged_scores",
        "traffic_requests",
        "traffic_source",
        "verifier",
        "verifier_trainer",
    ],
    "solaris.store": [
        "FEATURE_SERVICE",
        "SERVING_VIEWS",
        "VIEWS",
        "InvalidWriteError",
        "ViewParams",
        "ViewSpec",
    ],
    "solaris.errors": ["ConfigError", "SolarisError", "shown"],
    "solaris.config": [
        "CRON_PRESETS",
        "ENV_NESTED_DELIMITER",
        "ENV_PREFIX",
        "IMPORT_PATH",
        "NON_SETTING_ENV",
        "CycleConfig",
        "DataConfig",
        "ModelConfig",
        "NearlineConfig",
        "RequestLogConfig",
        "SelectionConfig",
        "SolarisConfig",
        "StoreConfig",
        "TrainConfig",
        "describe_errors",
        "redacted_settings",
        "whole_seconds",
    ],
    "solaris.connection": [
        "COMMON_OPTIONS",
        "ENDPOINT_PORT",
        "LOCAL_REDIS",
        "ConnectionStringError",
        "RedisTarget",
        "RedisType",
        "answers",
        "client_options",
        "ping_failure",
        "redacted",
        "redis_client",
        "unlink_matching",
    ],
}
GUIDES = ["README.md", "docs/adopting.md", "docs/serving.md", "docs/serving_http.md"]


@pytest.mark.parametrize("module", sorted(SURFACE))
def test_the_public_names_are_the_pinned_ones_and_all_exist(module: str) -> None:
    imported = importlib.import_module(module)
    assert list(imported.__all__) == SURFACE[module]
    for name in SURFACE[module]:
        assert hasattr(imported, name), f"{module}.{name}"


@pytest.mark.parametrize("guide", GUIDES)
def test_the_guides_code_imports_only_the_public_surface_or_an_example(guide: str) -> None:
    text = (ROOT / guide).read_text(encoding="utf-8")
    blocks = re.findall(r"```(?:python|bash)\n(.*?)```", text, flags=re.S)
    imported = set()
    for block in blocks:
        imported |= set(re.findall(r"from (solaris[\w.]*) import", block))
        imported |= set(re.findall(r"^\s*import (solaris[\w.]*)", block, flags=re.M))
    private = {m for m in imported if m not in SURFACE and not m.startswith("solaris.examples")}
    assert not private, f"{guide} has adopters import {sorted(private)}"
