"""The README's commands in the order a new user runs them, and again: ``make demo``, the
serving snippet, ``make demo`` (issue 45: the snippet, pasted after ``make demo``, marked
``demo`` live and the next ``make demo`` stopped with "will not reset namespace 'demo'").

The steps are read where the README keeps them, so the test follows it when it changes and
fails when one goes: ``make demo`` from a ``bash`` block, then the command the Makefile's
``demo`` target runs (``$(BIN)/solaris demo``, run here through the CLI in this process:
through ``make`` and fresh interpreters the same steps took 2.3 times as long), and the
serving snippet from its ``python`` block, executed as written. What would touch the
developer's own machine is moved, and nothing else: the settings (``SOLARIS_CONFIG``) are
the tiny fake MovieLens's, with a short window, a copy of the feature repo and the artifacts
in a temporary folder, and the snippet's ``redis="localhost:6379"`` becomes this module's
own Redis database, so the developer's ``demo`` namespace is never read or written.
"""

from __future__ import annotations

import re
import shlex
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from solaris.cli import app
from solaris.config import SolarisConfig
from solaris.connection import redis_client
from solaris.namespace import Namespace
from solaris.orchestration.resources import live_state
from solaris.store.feast_store import delete_project_keys

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
REDIS = "127.0.0.1:6379,db=6"  # this module's own database number
DEMO = "demo"  # the namespace `solaris demo` replays into by default
SNIPPET_REDIS = '"localhost:6379"'  # the Redis the README's snippet connects to


def _fenced(text: str, language: str) -> list[str]:
    """The code blocks of ``text`` fenced as ``language``, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)


def readme_steps() -> tuple[list[str], str]:
    """The ``solaris`` arguments of the README's ``make demo`` (through the Makefile's
    ``demo`` recipe) and the README's serving snippet (the ``python`` block that opens
    ``SolarisFeatures`` and logs a request); fails naming what moved."""
    readme = README.read_text()
    commands = [
        shlex.split(line, comments=True)
        for block in _fenced(readme, "bash")
        for line in block.splitlines()
        if line.startswith("make ")
    ]
    assert ["make", "demo"] in commands, f"the README no longer runs `make demo`: {commands}"
    recipe = re.search(r"^demo:.*\n\t(.+)$", (REPO / "Makefile").read_text(), flags=re.M)
    assert recipe, "the Makefile has no demo target"
    runs = shlex.split(recipe.group(1))
    assert runs[0] == "$(BIN)/solaris", f"`make demo` runs {recipe.group(1)!r}, not solaris"
    snippets = [b for b in _fenced(readme, "python") if "SolarisFeatures(" in b]
    assert len(snippets) == 1, "the README's serving snippet (SolarisFeatures) moved"
    assert "log_request(" in snippets[0], "the snippet no longer logs a request"
    assert SNIPPET_REDIS in snippets[0], f"the snippet no longer connects to {SNIPPET_REDIS}"
    return runs[1:], snippets[0]


def _forget_demo() -> None:
    client = redis_client(REDIS, timeout_s=5.0)
    try:
        delete_project_keys(client, DEMO)  # every `demo:*` key: views, streams, the marker
    finally:
        client.close()


def test_make_demo_then_the_serving_snippet_then_make_demo_again(
    tmp_path: Path, write_movielens, tiny_config, monkeypatch, capsys
) -> None:
    import os

    demo, snippet = readme_steps()
    write_movielens(tmp_path / "ml-100k")
    settings = tiny_config(tmp_path, "readme", REDIS)  # the settings' own namespace: not demo
    settings["cycle"] = {
        "dags_folder": str(REPO / "dags"),
        "airflow_home": os.environ["AIRFLOW_HOME"],  # the session's (tests/conftest.py)
        "demo_days": 0.25,
        "demo_cadence_minutes": 1440,  # two intervals: a warm-up day and the test period
    }
    config = tmp_path / "solaris.yaml"
    config.write_text(yaml.safe_dump(settings))
    for name in [k for k in os.environ if k.startswith("SOLARIS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("SOLARIS_CONFIG", str(config))
    monkeypatch.chdir(tmp_path)  # "from the repository root": nothing relative is read
    namespace = Namespace.of(SolarisConfig.load(config, namespace=DEMO))
    code = compile(snippet.replace(SNIPPET_REDIS, repr(REDIS)), str(README), "exec")
    _forget_demo()
    try:
        began = time.monotonic()
        first = CliRunner().invoke(app, demo)
        assert first.exit_code == 0, first.output[-3000:]
        assert f"replay in namespace {DEMO}:" in first.output, first.output[-3000:]
        capsys.readouterr()
        exec(code, {"__name__": "__readme__"})  # the snippet, as a user pastes it
        assert re.fullmatch(r"\['\w+' '\w+' '\w+'\]\n", capsys.readouterr().out)
        client = redis_client(REDIS, timeout_s=5.0)
        try:
            logged = client.xlen(namespace.request_stream)
            marker = client.get(namespace.live_key)
        finally:
            client.close()
        judged = live_state(SolarisConfig.load(config), DEMO)  # the rule both refusals use
        again = CliRunner().invoke(app, demo)
        took = time.monotonic() - began
    finally:
        _forget_demo()
    assert again.exit_code == 0, f"the second `make demo` stopped:\n{again.output[-3000:]}"
    assert f"replay in namespace {DEMO}:" in again.output  # its reset and DAG runs went on
    assert marker is None and judged is None, f"the snippet marked {DEMO!r} live: {judged}"
    assert logged == 1, "the snippet's log_request did not reach the request log"
    assert took < 300, f"the README's steps took {took:.0f} s"
