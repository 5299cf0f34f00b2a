"""What one view of a project costs in Redis: keys, rows, bytes per row against its record.

Reads ``MEMORY USAGE`` (exact, ``SAMPLES 0``) of every key of the view and the lengths of its
records; used by ``make demo`` and the benchmark to report bytes per cached pair.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from solaris.store import keys
from solaris.store.contract import ViewSpec

__all__ = ["Footprint", "view_footprint"]


@dataclass(frozen=True)
class Footprint:
    """Memory of one view's keys.

    Attributes:
        keys: keys of the view.
        rows: rows (hash fields, prune markers excluded; one per string key).
        bytes: ``MEMORY USAGE`` summed over the keys (key, encoding overhead, values).
        record_bytes: the records' own bytes summed (the payload).
        encodings: key count per Redis encoding (``listpack``, ``hashtable``, ...).
    """

    keys: int
    rows: int
    bytes: int
    record_bytes: int
    encodings: dict[str, int]

    @property
    def bytes_per_row(self) -> float:
        return self.bytes / max(self.rows, 1)

    @property
    def overhead(self) -> float:
        """Redis bytes per payload byte (1.0 would be the records alone)."""
        return self.bytes / max(self.record_bytes, 1)


def view_footprint(client, project: str, spec: ViewSpec, scan_count: int = 1000) -> Footprint:
    """The :class:`Footprint` of ``spec``'s keys in ``project``."""
    found: list[bytes] = []
    for pattern in keys.view_patterns(project, spec):
        found.extend(client.scan_iter(match=pattern, count=scan_count))
    pipe = client.pipeline(transaction=False)
    for key in found:
        pipe.memory_usage(key, samples=0)
        pipe.object("encoding", key)
        if spec.member is not None:
            pipe.hgetall(key)
        else:
            pipe.get(key)
    replies = pipe.execute()
    total = rows = record_bytes = 0
    encodings: Counter[str] = Counter()
    for k in range(len(found)):
        usage, encoding, value = replies[3 * k : 3 * k + 3]
        total += int(usage or 0)
        encodings[encoding.decode() if isinstance(encoding, bytes) else str(encoding)] += 1
        if spec.member is None:
            rows += value is not None
            record_bytes += len(value or b"")
            continue
        records = [v for f, v in value.items() if f != b""]  # b"": the prune marker
        rows += len(records)
        record_bytes += sum(map(len, records))
    return Footprint(len(found), rows, total, record_bytes, dict(encodings))
