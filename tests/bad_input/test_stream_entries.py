"""Bad entries of the near-line embed stream: stamped before ``cycle.start`` (1970) or far
past the wall clock.

Anyone who can write to the Redis can add an entry, so the embedder
(:meth:`~solaris.orchestration.nearline.NearlineEmbedder.process`) takes nothing on trust:
an entry whose time no interval of the cycle covers would embed a pair as of that time
(a 1970 entry: with no history at all) and write it as a fresh code. Such an entry is
skipped, counted as malformed, acknowledged and deleted like any unreadable one; nothing
else of the project changes (every Redis key but the stream is compared before and after).

The embedder is built without its FM and autoencoder (``__new__`` and the attributes
:meth:`process` reads), which a batch of only bad entries never reaches.
"""

from __future__ import annotations

import numpy as np
import pytest

from solaris.namespace import Namespace
from solaris.orchestration.nearline import NearlineEmbedder, NearlineStats
from solaris.serving.nearline import parse_entry
from solaris.serving.streams import StreamEntryError

from .conftest import NOW, FeastWorld

pytestmark = pytest.mark.integration


def _fields(ts: int) -> dict[bytes, bytes]:
    return {b"user": b"1", b"ts": str(ts).encode(), b"items": np.int64([10, 11]).tobytes()}


STAMPS = [
    pytest.param(0, r"ts 0 \(1970-01-01T00:00:00\+00:00\) is before cycle\.start "
             r"\(1997-09-20T00:00:00\+00:00\)", id="1970"),
    pytest.param(874_713_599, r"ts 874713599 .* is before cycle\.start", id="a-second-early"),
    pytest.param(9_100_000_000, r"ts 9100000000 is more than a day past the wall clock",
                 id="year-2258"),
]  # fmt: skip


@pytest.mark.parametrize(("ts", "message"), STAMPS)
def test_an_entry_stamped_outside_the_cycle_is_refused_naming_its_time(
    ts: int, message: str, feast_world: FeastWorld
) -> None:
    not_before = int(feast_world.cfg.cycle.start.timestamp())
    with pytest.raises(StreamEntryError, match=message):
        parse_entry(_fields(ts), not_before=not_before)
    assert parse_entry(_fields(NOW), not_before=not_before).ts == NOW  # the valid entry


@pytest.mark.parametrize(("ts", "message"), STAMPS)
def test_the_embedder_skips_counts_and_deletes_an_entry_stamped_outside_the_cycle(
    ts: int, message: str, feast_world: FeastWorld, snapshot_redis
) -> None:
    client = feast_world.client
    stream = Namespace.of(feast_world.cfg).embed_stream
    group = feast_world.cfg.nearline.group
    client.xgroup_create(stream, group, id="0", mkstream=True)
    try:
        client.xadd(stream, _fields(ts))
        others = snapshot_redis(client, feast_world.key_pattern)
        before = {k: v for k, v in others().items() if k != stream.encode()}
        [[_, entries]] = client.xreadgroup(group, "drill", {stream: ">"})
        embedder = NearlineEmbedder.__new__(NearlineEmbedder)
        embedder.cfg, embedder.stream, embedder.group = feast_world.cfg, stream, group
        embedder.stats, embedder._redis = NearlineStats(), client

        assert embedder.process(entries) == 0

        assert (embedder.stats.malformed, embedder.stats.embedded) == (1, 0)
        assert client.xlen(stream) == 0  # deleted, not left for ever
        assert client.xpending(stream, group)["pending"] == 0  # acknowledged
        assert {k: v for k, v in others().items() if k != stream.encode()} == before
    finally:
        client.delete(stream)
