"""Bad arguments to the ``solaris`` command: an unknown command or option, bad namespace
names, a missing or bad config file, ``namespace reset`` of the live namespace without
``--force``, times that are not ISO 8601 with a zone, values out of range.

The installed ``solaris`` script runs as a subprocess (as a user runs it) in a working
directory of its own, with settings pointing its artifacts, feature repo and Redis database
there. Each case checks a non-zero exit status, a message on stderr that names the argument
(or setting), no traceback, and that no file under the working directory and no Redis key of
the namespaces involved changed (the namespaces hold state beforehand, so a reset that
slipped through would show).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis as redis_py

from .conftest import REDIS

pytestmark = pytest.mark.integration

NAMESPACES = ("live", "demo", "r1998", "prod", "served")
SERVED_MARKER = '{"first_request_ts": 1700000000, "request_id": 7}'  # serving logged live
LIVE_RECORD = "runs/solaris_candidates/01700000000-01700000900.json"  # prod ran live
_BOX = re.compile(r"[│╭╮╰╯─]")


def _solaris() -> list[str]:
    script = Path(sys.executable).with_name("solaris")
    return [str(script)] if script.exists() else [sys.executable, "-m", "solaris.cli"]


@pytest.fixture
def world(tmp_path: Path, redis_client: redis_py.Redis, snapshot_files, snapshot_redis) -> Any:
    """A working directory and Redis database where every namespace of :data:`NAMESPACES`
    holds a key, a cycle-state file and an offline file; cleaned up after."""
    for name in NAMESPACES:
        redis_client.hset(f"{name}:pair:{{u:1}}", b"item", b"record")
        state = tmp_path / "artifacts" / "namespaces" / name
        state.mkdir(parents=True)
        (state / "ledger.parquet").write_bytes(b"state")
        if name == "served":  # no name, no record: only serving's marker on Redis
            redis_client.set("served:live", SERVED_MARKER)
        if name == "prod":  # no reserved name: only its run record says it holds live state
            (state / LIVE_RECORD).parent.mkdir(parents=True)
            (state / LIVE_RECORD).write_text('{"namespace": "prod", "replay": false}')
        offline = tmp_path / "feature_repo" / "data" / "offline" / name / "pair"
        offline.mkdir(parents=True)
        (offline / "batch-1.parquet").write_bytes(b"rows")
    (tmp_path / "solaris.yaml").write_text("selection:\n  shar: 0.1\n")
    (tmp_path / "broken.yaml").write_text("selection: [unclosed\n  share: :\n")
    (tmp_path / "a_folder.yaml").mkdir()
    files = snapshot_files(tmp_path)
    keys = [snapshot_redis(redis_client, f"{name}:*") for name in NAMESPACES]
    world = {
        "dir": tmp_path,
        "state": lambda: (files(), [k() for k in keys]),
    }
    yield world
    for name in NAMESPACES:
        for key in redis_client.scan_iter(match=f"{name}:*"):
            redis_client.unlink(key)


def _run(world: dict, args: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run ``solaris args`` in the world; its exit status and stderr (box drawing removed,
    whitespace collapsed, so that wrapped messages read as one line)."""
    base = {k: v for k, v in os.environ.items() if not k.upper().startswith("SOLARIS_")}
    folder = world["dir"]
    base.update(
        SOLARIS_ARTIFACTS_DIR=str(folder / "artifacts"),
        SOLARIS_STORE__REPO_PATH=str(folder / "feature_repo"),
        SOLARIS_STORE__REDIS=REDIS,
        SOLARIS_DATA__CACHE_DIR=str(folder / "cache"),
        COLUMNS="200",
        NO_COLOR="1",
    )
    base.update(env or {})
    done = subprocess.run(
        [*_solaris(), *args],
        cwd=folder,
        env=base,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, " ".join(_BOX.sub(" ", done.stderr).split())


ISO = "2023-11-15T00:00:00+00:00"

CASES = [
    pytest.param(["frobnicate"], {}, 2, r"No such command 'frobnicate'", id="unknown-command"),
    pytest.param(["demo", "--frobnicate"], {}, 2, r"No such option: --frobnicate",
                 id="unknown-option"),
    pytest.param(["cycle"], {}, 2, r"Missing option '--start'", id="missing-option"),
    pytest.param(["namespace", "reset", "Bad-Name"], {}, 2,
                 r"Invalid value for NAME: 'Bad-Name' is not a namespace name",
                 id="reset-bad-namespace-name"),
    pytest.param(["namespace", "reset", "live"], {}, 1,
                 r"^Error: will not reset namespace 'live': 'live' is the live namespace.*"
                 r"Nothing was changed.*--force", id="reset-live-without-force"),
    pytest.param(["namespace", "reset", "prod"], {}, 1,
                 r"^Error: will not reset namespace 'prod': 'prod' holds a cycle run on live "
                 r"traffic \(run record .*01700000000-01700000900\.json, replay: false\)",
                 id="reset-a-namespace-that-ran-live"),
    pytest.param(["namespace", "reset", "r1998"], {"SOLARIS_NAMESPACE": "r1998"}, 1,
                 r"^Error: will not reset namespace 'r1998': 'r1998' is the namespace these "
                 r"settings run on live traffic", id="reset-the-settings-own-namespace"),
    pytest.param(["namespace", "reset", "served"], {}, 1,
                 r"^Error: will not reset namespace 'served': 'served' served live traffic "
                 r"\(Redis key served:live: \{\"first_request_ts\": 1700000000",
                 id="reset-served-live"),
    pytest.param(["demo", "--namespace", "served"], {}, 1,
                 r"^Error: will not replay into namespace 'served': 'served' served live",
                 id="demo-into-a-namespace-that-served-live"),
    pytest.param(["namespace", "reset", "demo"], {"SOLARIS_STORE__REDIS": "127.0.0.1:9,db=0"}, 1,
                 r"^Error: Redis at 127\.0\.0\.1:9,db=0 does not answer a PING",
                 id="reset-with-redis-down"),
    pytest.param(["demo", "--namespace", "live"], {}, 1,
                 r"^Error: will not replay into namespace 'live'.*--force", id="demo-into-live"),
    pytest.param(["demo", "--namespace", "prod"], {}, 1,
                 r"^Error: will not replay into namespace 'prod'", id="demo-ran-live"),
    pytest.param(["cycle", "--start", ISO, "--namespace", "prod"], {}, 1,
                 r"^Error: will not replay into namespace 'prod'", id="cycle-ran-live"),
    pytest.param(["namespace", "reset", "demo", "--config", "missing.yaml"], {}, 2,
                 r"Invalid value for '--config' / '-c': [Ff]ile 'missing\.yaml' does not exist",
                 id="config-file-missing"),
    pytest.param(["namespace", "reset", "demo", "--config", "a_folder.yaml"], {}, 2,
                 r"Invalid value for '--config' / '-c': [Ff]ile 'a_folder\.yaml' is a directory",
                 id="config-file-a-folder"),
    pytest.param(["namespace", "reset", "demo", "--config", "solaris.yaml"], {}, 1,
                 r"^Error: invalid SOLARIS configuration .*selection\.shar: Extra inputs are "
                 r"not permitted .*solaris\.yaml", id="config-file-unknown-key"),
    pytest.param(["namespace", "reset", "demo", "--config", "broken.yaml"], {}, 1,
                 r"^Error: .*broken\.yaml is not valid YAML \(line 2, column 8\)",
                 id="config-file-not-yaml"),
    pytest.param(["namespace", "reset", "demo"], {"SOLARIS_SELECTION__SHAR": "0.1"}, 1,
                 r"^Error: .*unknown setting SOLARIS_SELECTION__SHAR .*did you mean "
                 r"SOLARIS_SELECTION__SHARE", id="typo-d-variable-before-a-reset"),
    pytest.param(["cycle", "--start", "yesterday", "--namespace", "r1998"], {}, 2,
                 r"Invalid value for --start: epoch seconds or ISO 8601 with a zone expected, "
                 r"got 'yesterday'", id="start-not-iso"),
    pytest.param(["cycle", "--start", "1700000000000", "--namespace", "r1998"], {}, 2,
                 r"Invalid value for --start: 1700000000000 is outside \[0, 1e\+10\) epoch "
                 r"seconds", id="start-in-milliseconds"),
    pytest.param(["cycle", "--start", "2023-11-15T00:00:00", "--namespace", "r1998"], {}, 2,
                 r"Invalid value for --start: .* has no time zone", id="start-without-a-zone"),
    pytest.param(["cycle", "--start", ISO, "--namespace", "Replay-1998"], {}, 2,
                 r"Invalid value for --namespace: 'Replay-1998' is not a namespace name",
                 id="cycle-bad-namespace-name"),
    pytest.param(["cycle", "--start", ISO], {}, 1,
                 r"^Error: will not replay into namespace 'live': 'live' is the live namespace",
                 id="cycle-into-live"),
    pytest.param(["cycle", "--start", ISO, "--namespace", "r1998"], {}, 1,
                 r"^Error: no codes\.json in .*: train the autoencoder", id="cycle-no-models"),
    pytest.param(["fit-autoencoder", "--start", ISO, "--end", "2023-11-14T00:00:00+00:00"], {}, 2,
                 r"Invalid value for --end: .* is not after --start", id="end-before-start"),
    pytest.param(["fit-autoencoder", "--start", ISO, "--end", "tomorrow"], {}, 2,
                 r"Invalid value for --end: epoch seconds or ISO 8601 with a zone expected, "
                 r"got 'tomorrow'", id="end-not-iso"),
    pytest.param(["serve", "--fm-version", "fm-" + "x" * 100_000], {}, 2,
                 r"Invalid value for --fm-version: 100,003 characters 'fm-xxx+\.\.\. is not "
                 r"an fm_version: at most 64 characters", id="serve-fm-version-of-100-kb"),
    pytest.param(["serve", "--fm-version", "fm 1;rm"], {}, 2,
                 r"Invalid value for --fm-version: the value 'fm 1;rm' is not an fm_version",
                 id="serve-fm-version-with-spaces"),
    pytest.param(["serve", "--header-timeout", "0"], {}, 2,
                 r"Invalid value for --header-timeout: a finite number of seconds > 0 expected, "
                 r"got 0\.0", id="serve-header-timeout-zero"),
    pytest.param(["serve", "--header-timeout", "inf"], {}, 2,
                 r"Invalid value for --header-timeout: a finite number of seconds > 0 expected, "
                 r"got inf", id="serve-header-timeout-infinite"),
    pytest.param(["replay", "--share", "1.5"], {}, 2,
                 r"Invalid value for --share: Input should be less than or equal to 1 "
                 r"\(got 1\.5\)", id="share-above-one"),
    pytest.param(["replay", "--cadence-minutes", "0"], {}, 2,
                 r"Invalid value for --cadence-minutes: Input should be greater than or equal",
                 id="cadence-zero"),
    pytest.param(["replay", "--selector", "verfier"], {}, 2,
                 r"Invalid value for --selector: 'verfier' is not one of verifier, random, "
                 r"oracle", id="unknown-selector"),
    pytest.param(["report", "--seeds", "1,two"], {}, 2,
                 r"Invalid value for --seeds: '1,two' is not a comma-separated list of integers",
                 id="seeds-not-integers"),
    pytest.param(["data", "synth", "--out", "synth.parquet", "--pairs", "-5"], {}, 2,
                 r"Invalid value for --pairs: must be a positive integer, got -5",
                 id="synth-negative-pairs"),
    pytest.param(["data", "synth", "--out", "synth.parquet", "--users", "many"], {}, 2,
                 r"Invalid value for '--users': .*valid integer",
                 id="synth-users-not-a-number"),
    pytest.param(["replay"], {}, 1, r"^Error: no request log or models under .*run `solaris demo` "
                 r"first", id="replay-before-any-demo"),
    pytest.param(["data", "synth", "--out", "a_folder.yaml", "--pairs", "10"], {}, 2,
                 r"Invalid value for --out: 'a_folder.yaml' is a folder", id="synth-out-a-folder"),
    pytest.param(["data", "synth", "--out", "no/such/x.parquet", "--pairs", "10"], {}, 2,
                 r"Invalid value for --out: .*its folder 'no/such' does not exist",
                 id="synth-out-in-no-folder"),
    pytest.param(["data", "synth", "--out", "s.parquet", "--users", "3000000000"], {}, 2,
                 r"n_users 3,000,000,000 .* GiB of generator state, more than 8 GiB",
                 id="synth-users-past-memory"),
    pytest.param(["data", "synth", "--out", "s.parquet", "--items", "2000000000"], {}, 2,
                 r"n_items 2,000,000,000 need 59\.7 GiB of generator state, more than 8 GiB",
                 id="synth-items-past-memory"),
    pytest.param(["report", "--seeds", "1"], {}, 2,
                 r"Invalid value for --seeds: '1': give at least 2 distinct seeds",
                 id="report-one-seed"),
    pytest.param(["report", "--windows", "2"], {}, 2,
                 r"Invalid value for --windows: 2: give at least 3 windows",
                 id="report-two-windows"),
    pytest.param(["report", "--out", "solaris.yaml"], {}, 2,
                 r"Invalid value for --out: 'solaris.yaml' is a file, not a folder",
                 id="report-out-a-file"),
    pytest.param(["demo", "--namespace", "Bad-Name", "--no-airflow"], {}, 2,
                 r"Invalid value for --namespace: 'Bad-Name' is not a namespace name",
                 id="demo-bad-namespace-name"),
    # The product names no example adapter: settings without an FM are refused by name.
    pytest.param(["fit-autoencoder", "--start", "2023-11-14T00:00:00+00:00", "--end", ISO], {},
                 1, r"^Error: model\.foundation is not set: .*solaris\.examples\.movielens:"
                 r"foundation_model.*SOLARIS_MODEL__FOUNDATION", id="no-foundation-model"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "env", "status", "message"), CASES)
def test_bad_arguments_exit_non_zero_naming_them_without_a_traceback_or_a_write(
    args: list[str], env: dict[str, str], status: int, message: str, world: dict
) -> None:
    before = world["state"]()

    code, stderr = _run(world, args, env)

    assert code == status, stderr
    assert re.search(message, stderr), stderr
    assert "Traceback" not in stderr
    assert world["state"]() == before


def test_a_namespace_reset_that_is_allowed_does_delete_so_the_snapshot_would_catch_one(
    world: dict,
) -> None:
    before = world["state"]()
    code, stderr = _run(world, ["namespace", "reset", "demo"])
    assert code == 0, stderr
    after = world["state"]()
    assert after != before
    assert after[1][NAMESPACES.index("demo")] == {}  # demo's keys are gone
    assert after[1][NAMESPACES.index("live")] == before[1][NAMESPACES.index("live")]


def test_force_resets_a_namespace_that_holds_live_state_and_only_that_one(world: dict) -> None:
    before = world["state"]()
    code, stderr = _run(world, ["namespace", "reset", "prod", "--force"])
    assert code == 0, stderr
    after = world["state"]()
    assert after[1][NAMESPACES.index("prod")] == {}
    assert not (world["dir"] / "artifacts" / "namespaces" / "prod").exists()
    for name in ("live", "demo", "r1998", "served"):
        assert after[1][NAMESPACES.index(name)] == before[1][NAMESPACES.index(name)]
    # The marker goes with the rest of a forced reset.
    code, stderr = _run(world, ["namespace", "reset", "served", "--force"])
    assert code == 0, stderr
    assert world["state"]()[1][NAMESPACES.index("served")] == {}
