"""`feast serve` over HTTP on the SOLARIS store: statuses follow the read TTLs.

Non-Python services read Feast through its feature server; a stale or missing row must come
back as ``OUTSIDE_MAX_AGE`` / ``NOT_FOUND`` there too, never as ``PRESENT``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FEAST = Path(sys.executable).with_name("feast")
Z_DIM = 8  # as in conftest
NOW = 1_700_000_000
H = 3600


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.loads(reply.read())


@pytest.fixture
def feature_server(feast_store, solaris_cfg, redis_connection) -> Iterator[str]:
    """``feast serve`` on a free loopback port, over the test's repo copy and project."""
    repo = Path(solaris_cfg.store.repo_path)
    yaml_path = repo / "feature_store.yaml"
    before = yaml_path.read_text()
    port = _free_port()
    env = {
        **os.environ,
        "SOLARIS_NAMESPACE": solaris_cfg.namespace,  # the project: no file is edited
        "SOLARIS_STORE__REDIS": redis_connection,
        "SOLARIS_MODEL__Z_DIM": str(Z_DIM),
    }
    log = (repo / "serve.log").open("w")
    server = subprocess.Popen(
        [str(FEAST), "-c", str(repo), "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=1) as reply:
                    if reply.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail(f"feast serve did not start:\n{(repo / 'serve.log').read_text()}")
            time.sleep(0.25)
        yield url
        assert yaml_path.read_text() == before
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def test_feast_serve_reports_stale_and_missing_rows_as_such(feature_server, rows) -> None:
    z = np.arange(Z_DIM, dtype=np.float32) * 0.5
    rows.pair(1, 10, z, NOW - 60)  # fresh
    rows.pair(1, 11, z, NOW - 10 * H)  # older than the 6 h read TTL, inside the retention
    rows.uagg(1, z, 3, window_start=NOW - 4 * 24 * H, computed_at=NOW - 3 * 24 * H)  # stale
    body = {
        "feature_service": "solaris_serving",
        "entities": {"user_id": [1, 1, 1], "item_id": [10, 11, 12], "request_ts": [NOW] * 3},
        "full_feature_names": True,
    }
    answer = _post(f"{feature_server}/get-online-features", body)
    names = answer["metadata"]["feature_names"]
    by_name = dict(zip(names, answer["results"], strict=True))
    assert by_name["pair__z"]["statuses"] == ["PRESENT", "OUTSIDE_MAX_AGE", "NOT_FOUND"]
    assert by_name["pair__z"]["values"][0] == pytest.approx(z.tolist())
    assert by_name["pair__z"]["values"][1] is None
    assert by_name["uagg__count"]["statuses"] == ["OUTSIDE_MAX_AGE"] * 3
    assert by_name["nbr__z_top1"]["statuses"] == ["NOT_FOUND"] * 3
    assert by_name["user_id"]["values"] == [1, 1, 1]
