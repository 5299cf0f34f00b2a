"""Run records reach Airflow's own metrics backend: a real OpenTelemetry export over OTLP/HTTP
from a process configured only through ``AIRFLOW__METRICS__*`` settings.

(StatsD is the other backend; it needs the ``statsd`` package, which the lock does not
include, so it is not exercised here.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

# A task's process: Airflow is loaded, then the run writes its record.
TASK = """
import sys
from pathlib import Path

import airflow.sdk  # noqa: F401  (as in any task process)

from solaris.namespace import Namespace
from solaris.orchestration.layout import CycleLayout, write_run_record

root = Path(sys.argv[1])
record = {"seconds": 1.5, "selected": 30, "coverage": {"pair": 0.5}, "serving": None}
write_run_record(CycleLayout(Namespace("live", root, root)), "solaris_candidates", "k", record)
"""


@pytest.fixture
def collector() -> Iterator[tuple[int, list[bytes]]]:
    """An OTLP/HTTP metrics receiver on loopback: its port and the request bodies it got."""
    bodies: list[bytes] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.path == "/v1/metrics":
                bodies.append(body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_port, bodies
    server.shutdown()
    server.server_close()


def _points(bodies: list[bytes]) -> dict[str, list]:
    """Every exported data point by metric name."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )

    out: dict[str, list] = {}
    for body in bodies:
        for rm in ExportMetricsServiceRequest.FromString(body).resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    data = getattr(metric, metric.WhichOneof("data"))
                    out.setdefault(metric.name, []).extend(data.data_points)
    return out


def test_a_run_record_is_exported_through_airflows_opentelemetry_metrics(
    collector, tmp_path: Path
) -> None:
    port, bodies = collector
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW__METRICS__OTEL_ON": "True",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
    }
    done = subprocess.run(
        [sys.executable, "-c", TASK, str(tmp_path / "artifacts")],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "artifacts/namespaces/live/runs/solaris_candidates/k.json").is_file()
    points = _points(bodies)  # exported when the process exits
    prefix = "airflow.solaris.solaris_candidates"
    for name, value in (("seconds", 1.5), ("selected", 30.0), ("coverage.pair", 0.5)):
        [point] = points[f"{prefix}.{name}"]
        assert point.as_double == value
        assert {a.key: a.value.string_value for a in point.attributes} == {"namespace": "live"}
    [duration] = points[f"{prefix}.duration"]
    assert (duration.count, duration.sum) == (1, 1500.0)  # a timer, in milliseconds
    assert not [n for n in points if n.startswith(f"{prefix}.serving")]  # no figures: none sent
