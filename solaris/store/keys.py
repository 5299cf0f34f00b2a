"""Redis key names of the SOLARIS online store (docs/online_store_format.md).

::

    <project>:<view>:{<tag>:<id>}   a view with a partition entity: one key per entity id
                                    (pair, nbr: a hash of items; uagg, unn: a string)
    <project>:<view>                a view without one (iagg: one hash of items)

The ``{<tag>:<id>}`` part is a Redis Cluster hash tag: every key of user 42
(``{u:42}``) lives in the same slot, so one user's pair, nbr and uagg keys are on one node.
Hash fields are member ids in decimal (``"1682"``).
"""

from __future__ import annotations

from solaris.store.contract import ViewSpec

__all__ = [
    "SERVER_SETTINGS",
    "partition_key",
    "project_pattern",
    "view_key",
    "view_patterns",
]

SERVER_SETTINGS: dict[str, str] = {"hash-max-ziplist-value": "256"}
"""The Redis setting this layout is sized for: records up to 256 bytes (every SOLARIS hash
record) stay in a small hash's compact listpack encoding instead of a hashtable, which
takes the bytes per cached pair from about 1.6× to about 1.2× its record. Hashes with more
than ``hash-max-ziplist-entries`` (default 128) fields are hashtables either way, which
keeps ``HMGET`` of a few hundred candidates fast. (``ziplist`` is the name Redis 6.2 knows;
Redis 7 accepts it as an alias of ``hash-max-listpack-value``.) The embedded Redis uses it;
set it on your own server with ``CONFIG SET`` or in redis.conf."""


def view_key(project: str, spec: ViewSpec) -> str:
    """The key of a view without a partition entity, and the prefix of the others."""
    return f"{project}:{spec.name}"


def partition_key(prefix: str, spec: ViewSpec, partition_id: int) -> str:
    """The key of one partition of a view (``prefix`` is :func:`view_key`)."""
    assert spec.partition is not None
    return f"{prefix}:{{{spec.partition.tag}:{partition_id}}}"


def view_patterns(project: str, spec: ViewSpec) -> tuple[str, ...]:
    """``SCAN MATCH`` patterns of every key of one view (project names are ``[a-z0-9_]``)."""
    base = view_key(project, spec)
    return (f"{base}:*",) if spec.partition is not None else (base,)


def project_pattern(project: str) -> str:
    """``SCAN MATCH`` pattern of every key of a project's views."""
    return f"{project}:*"
