"""A local S3 endpoint whose every request and response byte is counted, for the benches.

moto's S3 server (the one the tests use), started in this process behind a WSGI layer that
counts each request by HTTP method and each byte of each response body: the figures are
what the object store served, measured outside the code under test."""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

__all__ = ["CountingStore", "start"]


class _Counting:
    """The WSGI layer: requests by method, response body bytes."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.lock = threading.Lock()
        self.methods: Counter[str] = Counter()
        self.by_folder: Counter[str] = Counter()  # "METHOD folder": what the requests were for
        self.bytes = 0

    def __call__(self, environ: dict, start_response: Any) -> Any:
        method = environ["REQUEST_METHOD"]
        with self.lock:
            self.methods[method] += 1
            self.by_folder[f"{method} {_folder(environ.get('PATH_INFO', ''))}"] += 1
        for chunk in self.app(environ, start_response):
            with self.lock:
                self.bytes += len(chunk)
            yield chunk


def _folder(path: str) -> str:
    """The kind of state a request touched: the folder below a namespace's root
    (``/<bucket>/state/namespaces/<ns>/<kind>/...``), or the path's first two parts."""
    parts = [p for p in path.split("/") if p]
    if "namespaces" in parts:
        at = parts.index("namespaces")
        return parts[at + 2] if len(parts) > at + 2 else "(namespace)"
    return "/".join(parts[1:3]) or "(bucket)"


@dataclass
class CountingStore:
    """A running endpoint: its URL, a fresh bucket, and its counters."""

    url: str
    bucket: str
    _counting: _Counting
    _server: Any

    def reset(self) -> None:
        with self._counting.lock:
            self._counting.methods.clear()
            self._counting.by_folder.clear()
            self._counting.bytes = 0

    def counts(self) -> tuple[dict[str, int], int]:
        """``(requests by method, bytes served)`` since the last :meth:`reset`."""
        with self._counting.lock:
            return dict(self._counting.methods), self._counting.bytes

    def by_folder(self) -> dict[str, int]:
        """Requests by ``"METHOD folder"`` since the last :meth:`reset`."""
        with self._counting.lock:
            return dict(self._counting.by_folder)

    def stop(self) -> None:
        self._server.shutdown()


def start(prefix: str = "bench") -> CountingStore:
    """Start the endpoint on a loopback port, point this process's AWS variables at it
    (what s3fs and the cycle's filesystems read) and create a bucket."""
    import s3fs
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    counting = _Counting(DomainDispatcherApplication(create_backend_app))
    server = make_server("127.0.0.1", 0, counting, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    os.environ.update(
        {
            "AWS_ENDPOINT_URL": url,
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",  # moto accepts any; nothing secret
            "AWS_DEFAULT_REGION": "us-east-1",
        }
    )
    bucket = f"{prefix}-{uuid.uuid4().hex[:8]}"
    s3fs.S3FileSystem(endpoint_url=url, skip_instance_cache=True).mkdir(bucket)
    store = CountingStore(url, bucket, counting, server)
    store.reset()
    return store
