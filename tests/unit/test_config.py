"""SolarisConfig rejects bad settings when it is built, naming the setting."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from solaris.config import NON_SETTING_ENV, SolarisConfig, StoreConfig, redacted_settings
from solaris.connection import RedisTarget
from solaris.errors import ConfigError, SolarisError


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No SOLARIS_ variable of the developer's shell or of other tests leaks in."""
    for name in list(os.environ):
        if name.upper().startswith("SOLARIS_"):
            monkeypatch.delenv(name)


def _yaml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "solaris.yaml"
    path.write_text(text)
    return path


# --- valid settings -------------------------------------------------------------------


def test_valid_defaults_load() -> None:
    cfg = SolarisConfig()
    assert cfg == SolarisConfig.load()
    assert cfg.namespace == "live"
    assert cfg.replay is False
    # No example is a default: an adopter who forgets an adapter gets an error naming it.
    assert cfg.model.foundation is None
    assert cfg.model.verifier == "solaris.adapters:logged_scores"
    assert cfg.model.trainer is None
    assert cfg.requests.source is None
    assert cfg.store.request_log_maxlen == 1_000_000
    assert cfg.cycle.wait_previous_minutes == 60.0
    assert cfg.cycle.start == datetime(1997, 9, 20, tzinfo=UTC)
    assert not hasattr(cfg.store, "project")
    assert not hasattr(cfg.store, "miss_stream")


def test_config_is_hashable() -> None:
    assert hash(SolarisConfig()) == hash(SolarisConfig())
    assert hash(SolarisConfig(selection={"share": 0.5})) != hash(SolarisConfig())


def test_config_and_sections_are_frozen() -> None:
    cfg = SolarisConfig()
    with pytest.raises(ValidationError):
        cfg.namespace = "other"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        cfg.selection.share = 0.5  # type: ignore[misc]


def test_env_overrides_yaml_and_overrides_override_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _yaml(tmp_path, "selection:\n  share: 0.3\n  ttl_hours: 2\nnamespace: replay_1998\n")
    monkeypatch.setenv("SOLARIS_SELECTION__SHARE", "0.4")
    cfg = SolarisConfig.load(path)
    assert cfg.selection.share == 0.4
    assert cfg.selection.ttl_hours == 2
    assert cfg.namespace == "replay_1998"
    assert SolarisConfig.load(path, device="cpu").device == "cpu"
    assert hash(cfg)


def test_yaml_path_from_solaris_config_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOLARIS_CONFIG", str(_yaml(tmp_path, "replay: true\n")))
    assert SolarisConfig.load().replay is True


def test_non_setting_variables_are_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in NON_SETTING_ENV - {"SOLARIS_CONFIG"}:
        monkeypatch.setenv(name, "x")
    assert SolarisConfig().namespace == "live"


@pytest.mark.parametrize("cron", ["*/5 * * * *", "0 3 * * 1-5", "@daily", "@once", "@annually"])
def test_cron_and_airflow_presets_accepted(cron: str) -> None:
    assert SolarisConfig(cycle={"clustering_cron": cron}).cycle.clustering_cron == cron


def test_trainer_may_be_none() -> None:
    assert SolarisConfig(model={"trainer": None}).model.trainer is None


# --- unknown settings -----------------------------------------------------------------


def test_typo_in_nested_env_var_rejected_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SOLARIS_SELECTION__SHAR", "0.1")
    with pytest.raises(ConfigError, match=r"selection\.shar\b") as info:
        SolarisConfig()
    assert "SOLARIS_SELECTION__SHAR" in str(info.value)
    assert "SOLARIS_SELECTION__SHARE" in str(info.value)  # the suggestion
    with pytest.raises(ConfigError, match=r"selection\.shar\b"):
        SolarisConfig.load()


def test_typo_in_top_level_env_var_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOLARIS_DEVIC", "cpu")
    with pytest.raises(ConfigError, match="SOLARIS_DEVIC"):
        SolarisConfig()


def test_env_var_below_a_plain_setting_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOLARIS_STORE__REDIS__HOST", "localhost")
    with pytest.raises(ConfigError, match=r"store\.redis\.host"):
        SolarisConfig()


def test_lower_case_typo_in_env_var_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("solaris_selection__shar", "0.1")
    with pytest.raises(ConfigError, match=r"selection\.shar\b"):
        SolarisConfig()


def test_typo_in_yaml_rejected_naming_the_setting(tmp_path: Path) -> None:
    path = _yaml(tmp_path, "selection:\n  shar: 0.1\n")
    with pytest.raises(ConfigError, match=r"selection\.shar\b"):
        SolarisConfig.load(path)


def test_unknown_top_level_yaml_key_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="namespaces"):
        SolarisConfig.load(_yaml(tmp_path, "namespaces: live\n"))


def test_unknown_override_rejected() -> None:
    with pytest.raises(ConfigError, match=r"cycle\.strat"):
        SolarisConfig.load(cycle={"strat": "1998-01-01T00:00:00+00:00"})


def test_removed_store_fields_rejected() -> None:
    with pytest.raises(ConfigError, match=r"store\.project"):
        SolarisConfig(store={"project": "solaris"})
    with pytest.raises(ConfigError, match=r"store\.miss_stream\b"):
        SolarisConfig(store={"miss_stream": "solaris:misses"})


# --- impossible values ----------------------------------------------------------------


@pytest.mark.parametrize("value", ["inf", "-inf", "nan"])
def test_non_finite_ttl_rejected_naming_it(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("SOLARIS_SELECTION__TTL_HOURS", value)
    with pytest.raises(ConfigError, match=r"selection\.ttl_hours"):
        SolarisConfig()


def test_non_finite_float_rejected_in_overrides() -> None:
    with pytest.raises(ConfigError, match=r"cycle\.wait_previous_minutes"):
        SolarisConfig(cycle={"wait_previous_minutes": float("inf")})


@pytest.mark.parametrize("field", ["clustering_cron", "training_cron"])
@pytest.mark.parametrize("cron", ["0 0 * *", "61 0 * * *", "daily", "@midnight", ""])
def test_invalid_cron_rejected(field: str, cron: str) -> None:
    with pytest.raises(ConfigError, match=rf"cycle\.{field}"):
        SolarisConfig(cycle={field: cron})


def test_invalid_cron_from_env_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOLARIS_CYCLE__TRAINING_CRON", "every day")
    with pytest.raises(ConfigError, match=r"cycle\.training_cron"):
        SolarisConfig()


def test_cycle_start_not_a_date_rejected() -> None:
    with pytest.raises(ConfigError, match=r"cycle\.start"):
        SolarisConfig(cycle={"start": "not a date"})


def test_naive_cycle_start_rejected_asking_for_an_offset() -> None:
    with pytest.raises(ConfigError, match=r"cycle\.start") as info:
        SolarisConfig(cycle={"start": "1998-01-01T00:00:00"})
    assert "+00:00" in str(info.value)


def test_aware_cycle_start_accepted() -> None:
    cfg = SolarisConfig(cycle={"start": "1998-01-01T00:00:00+02:00"})
    assert cfg.cycle.start == datetime.fromisoformat("1998-01-01T00:00:00+02:00")
    assert cfg.cycle.start.utcoffset() is not None  # parsed once, here, into a datetime


@pytest.mark.parametrize("name", ["Live-1", "1live", "", "a" * 41, "live:1"])
def test_namespace_pattern_enforced(name: str) -> None:
    with pytest.raises(ConfigError, match="namespace"):
        SolarisConfig(namespace=name)


def test_namespace_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOLARIS_NAMESPACE", "replay_1998")
    assert SolarisConfig().namespace == "replay_1998"
    monkeypatch.setenv("SOLARIS_NAMESPACE", "Live-1")
    with pytest.raises(ConfigError, match="namespace"):
        SolarisConfig()


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ("model", "foundation"),
        ("model", "verifier"),
        ("model", "trainer"),
        ("requests", "source"),
    ],
)
@pytest.mark.parametrize("path", ["nocolon", "pkg.mod:", ":factory", "pkg.mod:fac-tory"])
def test_adapter_paths_validated(section: str, field: str, path: str) -> None:
    with pytest.raises(ConfigError, match=rf"{section}\.{field}"):
        SolarisConfig(**{section: {field: path}})


def test_store_request_log_maxlen_positive() -> None:
    with pytest.raises(ConfigError, match=r"store\.request_log_maxlen"):
        SolarisConfig(store={"request_log_maxlen": 0})


def test_config_errors_are_solaris_errors_naming_each_setting() -> None:
    with pytest.raises(SolarisError, match=r"(?s)selection\.shar\b.*device") as info:
        SolarisConfig(selection={"shar": 1}, device="tpu")
    assert isinstance(info.value, ValueError)


def test_config_errors_never_show_the_redis_connection_string() -> None:
    secret = "pa55-not-shown"
    with pytest.raises(ConfigError, match=r"store\.redis") as info:
        SolarisConfig(store={"redis": ["localhost:6379", f"password={secret}"]})
    assert secret not in str(info.value)


# --- the file, the environment and the Redis connection string ---------------------------


def test_an_empty_or_comment_only_file_loads_the_defaults(tmp_path: Path) -> None:
    assert SolarisConfig.load(_yaml(tmp_path, "")) == SolarisConfig()
    assert SolarisConfig.load(_yaml(tmp_path, "# nothing set\n")) == SolarisConfig()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("selection: {share: 0.1\n", r"not valid YAML \(line 2, column 1\)"),
        ("7\n", r"holds a YAML int, not a mapping"),
        ("- 1\n", r"holds a YAML list, not a mapping"),
    ],
)
def test_a_file_that_is_not_a_yaml_mapping_is_refused_naming_it_once(
    tmp_path: Path, text: str, message: str
) -> None:
    path = _yaml(tmp_path, text)
    with pytest.raises(ConfigError, match=message) as info:
        SolarisConfig.load(path)
    assert str(info.value).count(str(path)) == 1


def test_a_file_that_is_not_utf8_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "solaris.yaml"
    path.write_bytes(b"selection:\n  share: \xff\n")
    with pytest.raises(ConfigError, match=rf"{path} is not valid YAML"):
        SolarisConfig.load(path)


def test_a_bad_value_from_a_section_variable_names_that_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SOLARIS_SELECTION", '{"share": 5}')
    with pytest.raises(ConfigError, match=r"selection\.share: .*\(from SOLARIS_SELECTION\)"):
        SolarisConfig()


def test_a_bad_value_from_a_lower_case_variable_names_it_as_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("solaris_selection__share", "5")
    with pytest.raises(ConfigError, match=r"\(from solaris_selection__share\)"):
        SolarisConfig()


def test_a_bad_override_is_not_blamed_on_a_variable_it_overrides(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SOLARIS_SELECTION__SHARE", "0.5")
    with pytest.raises(ConfigError, match=r"selection\.share") as info:
        SolarisConfig(selection={"share": 5})
    assert "SOLARIS_SELECTION__SHARE" not in str(info.value)


def test_a_bad_variable_while_loading_a_file_names_the_variable_and_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _yaml(tmp_path, "selection:\n  ttl_hours: 2\n")
    monkeypatch.setenv("SOLARIS_SELECTION", "{not json")
    with pytest.raises(ConfigError, match=rf"SOLARIS_SELECTION is not valid JSON.*{path}"):
        SolarisConfig.load(path)


def test_a_bad_value_from_the_file_names_no_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOLARIS_SELECTION__TTL_HOURS", "2")
    with pytest.raises(ConfigError, match=r"selection\.share") as info:
        SolarisConfig.load(_yaml(tmp_path, "selection:\n  share: 5\n"))
    assert "from SOLARIS_" not in str(info.value)


def test_a_section_variable_that_is_not_json_names_it_without_its_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = "pa55-not-shown"
    monkeypatch.setenv("SOLARIS_STORE", f'{{"redis": "h:1,password={secret}"')
    with pytest.raises(ConfigError, match=r"store from SOLARIS_STORE is not valid JSON") as info:
        SolarisConfig()
    assert secret not in str(info.value)


def test_an_unusable_redis_connection_string_is_refused_when_built_without_the_password() -> None:
    secret = "pa55-not-shown"
    with pytest.raises(ConfigError, match=r"store\.redis: .*unknown option 'pasword'") as info:
        SolarisConfig(store={"redis": f"h:6379,pasword={secret}"})
    assert secret not in str(info.value)


@pytest.mark.parametrize(
    ("store", "message"),
    [
        ({"redis": "h:1,ssl_ca_certs=/ca.pem"}, r"ssl_ca_certs given without ssl=true"),
        ({"redis": "h:1,db=2", "redis_type": "redis_cluster"}, r"db must be 0"),
    ],
)
def test_a_redis_string_its_redis_type_cannot_use_is_refused_naming_store_redis(
    store: dict, message: str
) -> None:
    secret = "pa55-not-shown"
    store = {**store, "redis": f"{store['redis']},password={secret}"}
    with pytest.raises(ConfigError, match=rf"store: .*store\.redis: .*{message}") as info:
        SolarisConfig(store=store)
    assert secret not in str(info.value)


def test_a_bad_store_section_built_alone_does_not_quote_the_password() -> None:
    secret = "pa55-not-shown"
    with pytest.raises(ValidationError) as info:
        StoreConfig(redis=f"h:1,pasword={secret}")
    assert secret not in str(info.value)


def test_repr_and_str_of_the_settings_never_show_the_redis_connection_string() -> None:
    secret = "pa55-not-shown"
    cfg = SolarisConfig(store={"redis": f"cache:6379,username=svc,password={secret}"})
    assert cfg.store.redis is not None and secret in cfg.store.redis.connection_string
    for shown in (repr(cfg), str(cfg), repr(cfg.store), str(cfg.store)):
        assert secret not in shown
        assert "cache:6379" not in shown


# --- where the cycle's state and Feast's offline rows live -----------------------------


def test_state_and_offline_uris_take_folders_and_urls_of_known_filesystems() -> None:
    cfg = SolarisConfig(
        cycle={"state_uri": "s3://bucket/solaris"},
        store={"offline_uri": "s3://bucket/offline", "offline_s3_endpoint": "http://minio:9000"},
    )
    assert cfg.cycle.state_uri == "s3://bucket/solaris"
    assert SolarisConfig(cycle={"state_uri": "/mnt/state"}).cycle.state_uri == "/mnt/state"
    assert SolarisConfig().cycle.state_uri is None and SolarisConfig().store.offline_uri is None


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"cycle": {"state_uri": "nosuchfs://bucket/x"}}, "cycle.state_uri.*no filesystem"),
        ({"store": {"offline_uri": "gs://bucket/x"}}, "store.offline_uri.*s3:// URLs only"),
    ],
)
def test_a_uri_without_a_usable_filesystem_is_refused_naming_the_setting(settings, message):
    with pytest.raises(ConfigError, match=message):
        SolarisConfig(**settings)


@pytest.mark.parametrize("setting", ["cycle", "store"])
def test_a_login_in_a_storage_url_is_refused_and_never_shown(setting: str) -> None:
    secret = "pa55-not-shown"
    url = f"s3://key:{secret}@bucket/x"
    field = {"cycle": "state_uri", "store": "offline_uri"}[setting]
    with pytest.raises(ConfigError, match="credentials in the URL are refused") as info:
        SolarisConfig(**{setting: {field: url}})
    assert secret not in str(info.value)


def test_a_bad_sql_registry_value_is_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "pa55-not-shown"
    with pytest.raises(ConfigError) as info:
        SolarisConfig(store={"registry": ["postgresql://u:" + secret + "@h/db"]})
    assert "store.registry" in str(info.value) and secret not in str(info.value)


def test_durations_become_whole_seconds_by_one_rounding_rule() -> None:
    """Every layer takes a duration's seconds from the settings' properties: rounded, so
    4.35 h is 15,660 s (truncating gave 15,659)."""
    cfg = SolarisConfig(
        selection={"ttl_hours": 4.35, "cadence_minutes": 0.5},
        store={"uagg_window_hours": 4.35, "unn_ttl_hours": 1.6 / 3600},
        cycle={"wait_previous_minutes": 1.5, "demo_days": 0.25, "demo_cadence_minutes": 60},
    )
    assert cfg.selection.ttl_seconds == 15_660 and cfg.selection.cadence_seconds == 30
    assert cfg.store.uagg_window_seconds == 15_660 and cfg.store.unn_ttl_seconds == 2
    assert cfg.cycle.wait_previous_seconds == 90 and cfg.cycle.demo_seconds == 21_600
    assert cfg.cycle.demo_cadence_seconds == 3_600


def test_redacted_settings_keep_every_setting_but_the_redis_password() -> None:
    secret = "s3cr3t-Pa55"
    cfg = SolarisConfig(store=StoreConfig(redis=f"h:1,username=svc,password={secret}"))
    data = redacted_settings(cfg)
    assert data["store"]["redis"] == "h:1,username=svc,password=***"
    assert secret not in repr(data)
    assert {k: v for k, v in data.items() if k != "store"} == {
        k: v for k, v in json.loads(cfg.model_dump_json()).items() if k != "store"
    }


def test_redacted_settings_hide_the_password_of_a_sql_registry_url() -> None:
    secret = "s3cr3t-Pa55"
    url = f"postgresql+psycopg2://feast:{secret}@db.internal:5432/feast"
    data = redacted_settings(SolarisConfig(store=StoreConfig(registry=url)))
    assert data["store"]["registry"] == "postgresql+psycopg2://feast:***@db.internal:5432/feast"
    assert secret not in repr(data)


def test_store_redis_is_parsed_once_into_a_target_from_a_variable_a_file_or_a_keyword(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = "cache:6380,db=2,password=p,ssl=true"
    expected = RedisTarget.parse(text)
    assert SolarisConfig(store={"redis": text}).store.redis == expected
    monkeypatch.setenv("SOLARIS_STORE__REDIS", text)  # the string itself, not JSON
    assert SolarisConfig().store.redis == expected
    monkeypatch.delenv("SOLARIS_STORE__REDIS")
    path = tmp_path / "solaris.yaml"
    path.write_text(f"store:\n  redis: '{text}'\n")
    assert SolarisConfig.load(path).store.redis == expected


def test_settings_dump_the_redis_target_as_its_string_and_load_it_back() -> None:
    cfg = SolarisConfig(store={"redis": "cache:6380,db=2"})
    assert cfg.model_dump()["store"]["redis"] == "cache:6380,db=2"
    again = SolarisConfig.model_validate_json(cfg.model_dump_json())
    assert again.store.redis == cfg.store.redis and hash(again) == hash(cfg)


def test_a_store_redis_that_is_not_a_string_is_refused_naming_the_setting() -> None:
    with pytest.raises(ConfigError, match=r"store\.redis"):
        SolarisConfig.load(None, store={"redis": 6379})
