"""Bad settings: broken YAML, unknown keys in sections, typo'd ``SOLARIS_`` variables,
out-of-range values, wrong types, a missing file, and Redis connection strings that cannot
be used.

:meth:`SolarisConfig.load <solaris.config.SolarisConfig.load>` and ``SolarisConfig(...)``
raise :class:`~solaris.errors.ConfigError` (a ``SolarisError`` and a ``ValueError``) naming
each bad setting by its dotted name and where it came from (the file, the variable);
:meth:`RedisTarget.parse <solaris.connection.RedisTarget.parse>` raises a
``SolarisError`` naming the node or option, never a password. Reading settings writes
nothing: the folder of the file (the working directory) is compared before and after.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import get_args

import pytest
from pydantic import BaseModel

from solaris.config import SolarisConfig
from solaris.connection import RedisTarget
from solaris.errors import SolarisError

SECRET = "hunter2-not-a-real-password"


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, snapshot_files) -> Callable:
    """Runs the case in ``tmp_path``; returns its file snapshot (take it after writing the
    case's config file)."""
    monkeypatch.chdir(tmp_path)
    return snapshot_files(tmp_path)


def _expect_config_error(call: Callable[[], object], *patterns: str) -> str:
    """The message of the ``ValueError`` that ``call`` raises; it must match every pattern
    and be a :class:`SolarisError` (a ``ConfigError``)."""
    with pytest.raises(ValueError) as caught:
        call()
    message = str(caught.value)
    for pattern in patterns:
        assert re.search(pattern, message), (pattern, message)
    assert isinstance(caught.value, SolarisError), type(caught.value)
    return message


# --------------------------------------------------------------------------------------------
# The YAML file
# --------------------------------------------------------------------------------------------

YAML_CASES = [
    ("unknown-key-in-a-section", "selection:\n  shar: 0.1\n",
     r"selection\.shar: Extra inputs are not permitted"),
    ("unknown-section", "selectoin:\n  share: 0.1\n", r"selectoin: Extra inputs are not permitted"),
    ("share-above-one", "selection:\n  share: 1.5\n",
     r"selection\.share: Input should be less than or equal to 1 \(got 1\.5\)"),
    ("negative-ttl", "selection:\n  ttl_hours: -6\n",
     r"selection\.ttl_hours: Input should be greater than or equal to 0\.000277"),
    ("ttl-nan", "selection:\n  ttl_hours: .nan\n",
     r"selection\.ttl_hours: Input should be a finite"),
    ("ttl-inf", "store:\n  uagg_ttl_hours: .inf\n",
     r"store\.uagg_ttl_hours: Input should be a finite"),
    ("z-dim-not-a-number", "model:\n  z_dim: big\n",
     r"model\.z_dim: Input should be a valid integer.*\(got 'big'\)"),
    ("section-not-a-mapping", "selection: 3\n", r"selection: Input should be a valid dictionary"),
    ("redis-type-unknown", "store:\n  redis_type: cluster\n",
     r"store\.redis_type: Input should be 'redis' or 'redis_cluster'"),
    ("start-without-a-zone", "cycle:\n  start: '1997-09-20T00:00:00'\n",
     r"cycle\.start: .*has no UTC offset"),
    ("cron-out-of-range", "cycle:\n  clustering_cron: '61 * * * *'\n",
     r"cycle\.clustering_cron: .*is not a valid cron expression"),
    ("namespace-with-capitals", "namespace: Replay-1998\n",
     r"namespace: String should match pattern"),
    ("shares-leave-no-test-period", "train:\n  train_share: 0.8\n  val_share: 0.3\n",
     r"train: .*train_share \+ val_share must leave a test period"),
    ("no-task", "model:\n  tasks: []\n",
     r"model\.tasks: .*no task: the FM needs at least one task head .*\(got \[\]\)"),
    ("a-task-twice", "model:\n  tasks: [like, like]\n",
     r"model\.tasks: .*like named more than once"),
    ("cron-with-a-seconds-field", "cycle:\n  maintenance_cron: '0 15 3 * * *'\n",
     r"cycle\.maintenance_cron: .*'0 15 3 \* \* \*' has 6 fields: a cron expression has five"),
    ("cron-with-a-year-field", "cycle:\n  training_cron: '30 0 * * * 2030'\n",
     r"cycle\.training_cron: .*has 6 fields"),
    ("partitions-true", "cycle:\n  partitions: true\n",
     r"cycle\.partitions: .*True is a boolean, not a number: .*\(got True\)"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "message"), [c[1:] for c in YAML_CASES], ids=[c[0] for c in YAML_CASES]
)
def test_a_bad_setting_in_the_file_is_refused_naming_it_and_the_file(
    text: str, message: str, tmp_path: Path, workdir
) -> None:
    path = tmp_path / "solaris.yaml"
    path.write_text(text)
    before = workdir()

    _expect_config_error(lambda: SolarisConfig.load(path), message, str(path))
    assert workdir() == before


def test_a_secret_setting_of_the_wrong_type_is_named_without_its_value(
    tmp_path: Path, workdir
) -> None:
    path = tmp_path / "solaris.yaml"
    path.write_text(f"store:\n  redis:\n    host: cache\n    password: {SECRET}\n")
    before = workdir()

    message = _expect_config_error(lambda: SolarisConfig.load(path), r"store\.redis: ")
    assert SECRET not in message
    assert workdir() == before


BROKEN_FILES = [
    pytest.param("store: [unclosed\n  redis: :\n", r"not valid YAML \(line 2, column 8\)",
                 id="not-yaml"),
    pytest.param("store:\n\tredis: x\n", r"not valid YAML \(line 2, column 1\)", id="tab-indent"),
    pytest.param("- selection\n- store\n", r"holds a YAML list, not a mapping", id="a-list"),
    pytest.param("just words\n", r"holds a YAML str, not a mapping", id="a-scalar"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "where"), BROKEN_FILES)
def test_a_file_that_is_not_a_yaml_mapping_is_refused_naming_the_file(
    text: str, where: str, tmp_path: Path, workdir
) -> None:
    path = tmp_path / "solaris.yaml"
    path.write_text(text)
    before = workdir()

    _expect_config_error(lambda: SolarisConfig.load(path), str(path), where)
    assert workdir() == before


@pytest.mark.parametrize("kind", ["missing", "a-folder"])
def test_a_config_path_that_is_not_a_file_is_refused_naming_it(
    kind: str, tmp_path: Path, workdir
) -> None:
    path = tmp_path / "solaris.yaml"
    if kind == "a-folder":
        path.mkdir()
    before = workdir()

    _expect_config_error(lambda: SolarisConfig.load(path), rf"not found: {path}")
    assert workdir() == before
    assert path.exists() == (kind == "a-folder")


# --------------------------------------------------------------------------------------------
# Classes of settings: every number, every duration, every schedule
# --------------------------------------------------------------------------------------------


def _settings(kinds: tuple[type, ...]) -> list[tuple[str, str]]:
    """``(section, name)`` of every setting of a section whose type is one of ``kinds``
    (alone or ``| None``)."""
    found = []
    for section, field in SolarisConfig.model_fields.items():
        model = field.annotation
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            continue
        for name, setting in model.model_fields.items():
            types = (setting.annotation, *get_args(setting.annotation))
            if any(t in kinds for t in types):
                found.append((section, name))
    return found


NUMBERS = _settings((int, float))
# Durations by their unit's name; neighbour_index_hours is the one whose 0 means "always".
DURATIONS = [
    (section, name)
    for section, name in _settings((float,))
    if name.endswith(("_ms", "_seconds", "_minutes", "_hours", "_days"))
    and name != "neighbour_index_hours"
]
CRONS = [(s, n) for s, n in _settings((str,)) if n.endswith("_cron")]


def test_the_classes_below_are_found() -> None:
    assert ("cycle", "partitions") in NUMBERS and ("train", "lr") in NUMBERS
    assert len(NUMBERS) > 30
    assert ("store", "fetch_timeout_ms") in DURATIONS and (
        "nearline",
        "pending_seconds",
    ) in DURATIONS
    assert len(CRONS) == 3


@pytest.mark.parametrize("value", [True, False])
@pytest.mark.parametrize(("section", "name"), NUMBERS, ids=[f"{s}.{n}" for s, n in NUMBERS])
def test_a_boolean_is_refused_by_every_number_setting(
    section: str, name: str, value: bool, workdir
) -> None:
    before = workdir()
    _expect_config_error(
        lambda: SolarisConfig(**{section: {name: value}}),
        rf"^invalid SOLARIS configuration \(1 error\(s\)\):\n  {section}\.{name}: .*"
        rf"{value} is a boolean, not a number",
    )
    assert workdir() == before


@pytest.mark.parametrize(("section", "name"), DURATIONS, ids=[f"{s}.{n}" for s, n in DURATIONS])
def test_a_duration_of_a_nanosecond_is_refused_by_every_duration_setting(
    section: str, name: str, workdir
) -> None:
    before = workdir()
    _expect_config_error(
        lambda: SolarisConfig(**{section: {name: 1e-9}}),
        rf"{section}\.{name}: Input should be greater than or equal to .*\(got 1e-09\)",
    )
    assert workdir() == before


@pytest.mark.parametrize(("section", "name"), CRONS, ids=[f"{s}.{n}" for s, n in CRONS])
@pytest.mark.parametrize("cron", ["0 0 * * * *", "0 0 * * * * 2030", "0 0 * *"])
def test_a_cron_of_other_than_five_fields_is_refused_by_every_schedule(
    section: str, name: str, cron: str, workdir
) -> None:
    before = workdir()
    _expect_config_error(
        lambda: SolarisConfig(**{section: {name: cron}}),
        rf"{section}\.{name}: .*has {len(cron.split())} fields: a cron expression has five",
    )
    assert workdir() == before


# --------------------------------------------------------------------------------------------
# SOLARIS_ environment variables and keyword overrides
# --------------------------------------------------------------------------------------------

ENV_CASES = [
    ("typo-in-a-setting", "SOLARIS_SELECTION__SHAR", "0.1",
     r"unknown setting SOLARIS_SELECTION__SHAR \(selection\.shar\): did you mean "
     r"SOLARIS_SELECTION__SHARE"),
    ("typo-in-a-section", "SOLARIS_SELECTOIN__SHARE", "0.1",
     r"unknown setting SOLARIS_SELECTOIN__SHARE"),
    ("typo-at-the-top", "SOLARIS_DEVICES", "cpu",
     r"unknown setting SOLARIS_DEVICES \(devices\): did you mean SOLARIS_DEVICE"),
    ("not-a-number", "SOLARIS_SELECTION__SHARE", "a fifth", r"selection\.share: Input should be"),
    ("out-of-range", "SOLARIS_STORE__MAX_CANDIDATES", "0",
     r"store\.max_candidates: Input should be greater than 0"),
    ("ttl-past-any-time", "SOLARIS_SELECTION__TTL_HOURS", "1e308",
     r"selection\.ttl_hours: Input should be less than or equal to 87600"),
    ("ttl-below-a-second", "SOLARIS_STORE__UAGG_TTL_HOURS", "1e-9",
     r"store\.uagg_ttl_hours: Input should be greater than or equal to 0\.000277"),
    ("fetch-timeout-of-a-nanosecond", "SOLARIS_STORE__FETCH_TIMEOUT_MS", "1e-9",
     r"store\.fetch_timeout_ms: Input should be greater than or equal to 1 \(got '1e-9'\)"),
    ("cadence-of-years", "SOLARIS_SELECTION__CADENCE_MINUTES", "1e9",
     r"selection\.cadence_minutes: Input should be less than or equal to 10080"),
    ("retry-delay-of-years", "SOLARIS_CYCLE__RETRY_DELAY_SECONDS", "1e12",
     r"cycle\.retry_delay_seconds: Input should be less than or equal to 86400"),
    ("request-bucket-of-years", "SOLARIS_REQUESTS__BUCKET_SECONDS", "100000000",
     r"requests\.bucket_seconds: Input should be less than or equal to 86400"),
    ("unknown-choice", "SOLARIS_DEVICE", "tpu", r"device: Input should be 'auto', 'cpu' or 'cuda'"),
    ("nested-json-with-an-unknown-key", "SOLARIS_SELECTION", '{"shar": 0.1}',
     r"selection\.shar: Extra inputs are not permitted"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("variable", "value", "message"), [c[1:] for c in ENV_CASES], ids=[c[0] for c in ENV_CASES]
)
def test_a_bad_solaris_variable_is_refused_naming_the_setting(
    variable: str, value: str, message: str, monkeypatch: pytest.MonkeyPatch, workdir
) -> None:
    monkeypatch.setenv(variable, value)
    before = workdir()

    _expect_config_error(SolarisConfig.load, message)
    assert workdir() == before


def test_a_bad_value_from_the_environment_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, workdir
) -> None:
    monkeypatch.setenv("SOLARIS_SELECTION__SHARE", "a fifth")
    before = workdir()
    _expect_config_error(SolarisConfig.load, r"selection\.share", r"SOLARIS_SELECTION__SHARE")
    assert workdir() == before


OVERRIDE_CASES = [
    ("unknown-keyword", {"namespce": "replay"}, r"namespce: Extra inputs are not permitted"),
    ("unknown-key-in-a-section", {"selection": {"shar": 0.1}},
     r"selection\.shar: Extra inputs are not permitted"),
    ("zero-share", {"selection": {"share": 0}},
     r"selection\.share: Input should be greater than 0"),
    ("namespace-of-the-wrong-type", {"namespace": 42},
     r"namespace: Input should be a valid string"),
    ("replay-not-a-bool", {"replay": "sometimes"}, r"replay: Input should be a valid boolean"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("overrides", "message"), [c[1:] for c in OVERRIDE_CASES], ids=[c[0] for c in OVERRIDE_CASES]
)
def test_a_bad_keyword_override_is_refused_naming_it(
    overrides: dict, message: str, workdir
) -> None:
    before = workdir()
    _expect_config_error(lambda: SolarisConfig(**overrides), message)
    _expect_config_error(lambda: SolarisConfig.load(None, **overrides), message)
    assert workdir() == before


# --------------------------------------------------------------------------------------------
# Redis connection strings
# --------------------------------------------------------------------------------------------

CONNECTION_CASES = [
    pytest.param("", r"the Redis connection string is empty", id="empty"),
    pytest.param("db=1", r"names no host:port", id="no-host"),
    pytest.param("cache:port", r"'cache:port' is not host:port", id="port-not-a-number"),
    pytest.param("cache:6379,passwrd=x", r"unknown option 'passwrd'", id="unknown-option"),
    pytest.param(f"cache:6379,password={SECRET[:6]},{SECRET[6:]}", r"the value of password",
                 id="password-with-a-comma"),
    pytest.param("cache:99999", r"port.*99999", id="port-out-of-range"),
    pytest.param(f"redis://:{SECRET}@cache:6379/0", r"redis://", id="url-instead-of-host-port"),
    pytest.param("cache:6379,db=first", r"\bdb\b", id="db-not-a-number"),
    pytest.param("cache:6379,socket_timeout=abc", r"socket_timeout must be seconds > 0 .*'abc'",
                 id="timeout-not-a-number"),
    pytest.param("cache:6379,socket_timeout=0", r"socket_timeout must be seconds > 0",
                 id="timeout-zero"),
    pytest.param("cache:6379,protocol=9", r"protocol must be 2 or 3 .*got 9", id="protocol-9"),
    pytest.param("cache:6379,ssl=yes", r"ssl must be true or false, got 'yes'", id="ssl-yes"),
    pytest.param("cache:6379,max_connections=-1", r"max_connections must be a count > 0",
                 id="max-connections-negative"),
]  # fmt: skip


@pytest.mark.parametrize(("connection", "message"), CONNECTION_CASES)
def test_a_bad_redis_connection_string_is_refused_naming_the_part_never_the_password(
    connection: str, message: str, workdir
) -> None:
    before = workdir()
    text = _expect_config_error(lambda: RedisTarget.parse(connection), message)
    assert SECRET[:6] not in text and SECRET[6:] not in text
    assert workdir() == before


def test_a_tls_option_without_ssl_is_refused_naming_it(workdir) -> None:
    before = workdir()
    target = RedisTarget.parse("cache:6379,ssl_ca_certs=/etc/ca.pem")
    _expect_config_error(target.check, r"ssl_ca_certs given without ssl=true")
    assert workdir() == before


def test_an_unusable_store_redis_setting_is_refused_when_loading(
    monkeypatch: pytest.MonkeyPatch, workdir
) -> None:
    monkeypatch.setenv("SOLARIS_STORE__REDIS", f"cache:6379,passwrd={SECRET}")
    before = workdir()
    message = _expect_config_error(SolarisConfig.load, r"store\.redis", r"passwrd")
    assert SECRET not in message
    assert workdir() == before
