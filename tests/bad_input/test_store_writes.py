"""Bad online writes: a wrong view name, vectors of the wrong length or with NaN, bad TTLs,
entity keys and values that do not match, entity ids of the wrong type.

Through every way rows reach the store: the pipeline's
:func:`~solaris.pipeline.materialize.materialize` (offline parquet, then Redis), the online
store's bulk path (:meth:`~solaris.store.online.SolarisOnlineStore.write_table`) and Feast's
own write path (``online_write_batch``, as ``write_to_online_store``, ``feast materialize``
and pushes use it). Each case checks that the error names the view, the column and the first
bad row, and that no Redis key of the project and no offline file changed: a batch with
one bad row writes nothing at all.
"""

from __future__ import annotations

import contextlib
import copy
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from feast.protos.feast.types.EntityKey_pb2 import EntityKey
from feast.protos.feast.types.Value_pb2 import Value

from solaris.connection import RedisTarget
from solaris.errors import SolarisError
from solaris.pipeline.materialize import materialize
from solaris.store.contract import InvalidWriteError
from solaris.store.feast_store import online_store_of
from solaris.store.online import ViewDefinitionError

from .conftest import FM_VERSION, NOW, Z_DIM, FeastWorld, event_ts, pair_frame, vectors

pytestmark = pytest.mark.integration


@pytest.fixture
def unchanged(feast_world: FeastWorld, snapshot_files, snapshot_redis) -> Callable[[], None]:
    """Snapshots the project's Redis keys and offline files now; calling the result asserts
    that neither changed."""
    files = snapshot_files(feast_world.data_dir / "offline")
    keys = snapshot_redis(feast_world.client, feast_world.key_pattern)
    before = files(), keys()
    assert before[0] and before[1]  # the seeded rows: there is something to spoil

    def check() -> None:
        assert files() == before[0], "an offline file changed"
        assert keys() == before[1], "a Redis key changed"

    return check


def _arrow_pairs(z: list[list[float]], **over: object) -> pa.Table:
    """``pair`` rows as Arrow (NaN stays NaN; pandas would turn it into a null)."""
    n = len(z)
    columns = {
        "user_id": pa.array([2] * n, pa.int64()),
        "item_id": pa.array(range(20, 20 + n), pa.int64()),
        "z": pa.array(z, pa.list_(pa.float32())),
        "fm_version": [FM_VERSION] * n,
        "event_ts": pa.array([NOW * 1_000_000] * n, pa.timestamp("us", tz="UTC")),
    }
    return pa.table({**columns, **over})


GOOD = [[0.5] * Z_DIM]


def _nbr(**over: object) -> pd.DataFrame:
    row = {
        "user_id": [2],
        "item_id": [20],
        "z_top1": vectors(1),
        "z_mean": vectors(1, 2.0),
        "src_user": [3],
        "similarity": [0.9],
        "n_nbrs": [2],
        "fm_version": [FM_VERSION],
        "event_ts": event_ts(1),
    }
    return pd.DataFrame({**row, **over})


def _unn(**over: object) -> pd.DataFrame:
    row = {"user_id": [2], "nbr_ids": [[3, 4]], "nbr_sims": [[0.9, 0.8]], "event_ts": event_ts(1)}
    return pd.DataFrame({**row, **over})


def _uagg(**over: object) -> pd.DataFrame:
    row = {
        "user_id": [2],
        "z_sum": vectors(1),
        "count": [2],
        "window_start": [NOW - 86_400],
        "fm_version": [FM_VERSION],
        "event_ts": event_ts(1),
    }
    return pd.DataFrame({**row, **over})


def _many_good_then_one_bad() -> pd.DataFrame:
    good = pd.concat([pair_frame(1, user=u, first_item=20) for u in range(100, 400)])
    bad = pair_frame(1, user=400, first_item=20).assign(z=[np.ones(Z_DIM - 1, np.float32)])
    return pd.concat([good, bad], ignore_index=True)


MATERIALIZE_CASES: list[tuple[str, str, Callable[[], object], str]] = [
    ("unknown-view", "pairs", lambda: pair_frame(),
     r"unknown view 'pairs': the SOLARIS views are iagg, nbr, pair, uagg, unn"),
    ("view-name-not-a-string", None, lambda: pair_frame(), r"unknown view None"),
    ("vector-too-short", "pair", lambda: pair_frame(2).assign(z=[vectors(1)[0], np.ones(7)]),
     r"view 'pair', column 'z', row 1: expected 8 values, got 7"),
    ("vector-with-nan", "pair", lambda: _arrow_pairs([*GOOD, [0.5] * 7 + [float("nan")]]),
     r"view 'pair', column 'z', row 1: holds NaN or inf"),
    ("vector-with-nan-from-pandas", "pair",
     lambda: pair_frame(2).assign(z=[vectors(1)[0], np.full(Z_DIM, np.nan)]),
     r"view 'pair', column 'z'"),
    ("vector-with-inf", "pair", lambda: _arrow_pairs([[float("inf")] * Z_DIM, *GOOD]),
     r"view 'pair', column 'z', row 0: holds NaN or inf"),
    ("vector-beyond-float16", "pair", lambda: _arrow_pairs([*GOOD, [1e6] * Z_DIM]),
     r"view 'pair', column 'z', row 1: holds values outside the float16 range"),
    ("vector-of-strings", "pair", lambda: _arrow_pairs(GOOD).set_column(
        2, "z", pa.array([["a"] * Z_DIM], pa.list_(pa.string()))),
     r"view 'pair', column 'z': must hold numbers, got string"),
    ("negative-user-id", "pair", lambda: pair_frame(2).assign(user_id=[2, -2]),
     r"view 'pair', column 'user_id', row 1: ids must be >= 0, got -2"),
    ("user-id-as-strings", "pair", lambda: pair_frame(2).assign(user_id=["2", "3"]),
     r"view 'pair', column 'user_id': must be integers, got string"),
    ("item-id-as-floats", "pair", lambda: pair_frame(2).assign(item_id=[20.0, 21.5]),
     r"view 'pair', column 'item_id': must be integers, got double"),
    ("user-id-as-bools", "pair", lambda: pair_frame(2).assign(user_id=[True, False]),
     r"view 'pair', column 'user_id': must be integers, got bool"),
    ("fm-version-column-missing", "pair", lambda: pair_frame().drop(columns="fm_version"),
     r"view 'pair': missing columns \['fm_version'\]"),
    ("fm-version-empty", "pair", lambda: pair_frame(2).assign(fm_version=[FM_VERSION, ""]),
     r"view 'pair', column 'fm_version', row 1: is empty"),
    ("event-time-not-a-whole-second", "pair",
     lambda: pair_frame(2).assign(event_ts=event_ts(2) + pd.Timedelta(milliseconds=500)),
     r"view 'pair', column 'event_ts', row 0: must be a whole second"),
    ("event-time-as-ints", "pair", lambda: pair_frame(2).assign(event_ts=[NOW, NOW]),
     r"view 'pair', column 'event_ts': must be a timestamp, got int64"),
    ("event-time-after-2286", "pair",
     lambda: _arrow_pairs([*GOOD, *GOOD], event_ts=pa.array(
         [NOW * 10**6, 10**10 * 10**6], pa.timestamp("us", tz="UTC"))),
     r"view 'pair', column 'event_ts', row 1: is outside 1970 \.\. 2286"),
    ("computed-at-not-the-event-time", "pair", lambda: pair_frame(2).assign(computed_at=[NOW, 5]),
     r"view 'pair', column 'computed_at', row 1: 5 is not the event time 1700000000"),
    ("nbr-similarity-nan", "nbr", lambda: pa.Table.from_pandas(_nbr()).set_column(
        5, "similarity", pa.array([float("nan")], pa.float32())),
     r"view 'nbr', column 'similarity', row 0: is NaN or inf"),
    ("nbr-negative-source-user", "nbr", lambda: _nbr(src_user=[-3]),
     r"view 'nbr', column 'src_user', row 0: must be >= 0, got -3"),
    ("unn-lists-of-different-lengths", "unn", lambda: _unn(nbr_sims=[[0.9]]),
     r"view 'unn', column 'nbr_sims', row 0: must have as many values as nbr_ids"),
    ("unn-negative-neighbour-id", "unn", lambda: _unn(nbr_ids=[[3, -4]]),
     r"view 'unn', column 'nbr_ids': holds values below 0"),
    ("unn-user-its-own-neighbour", "unn",
     lambda: _unn(user_id=[2, 5], nbr_ids=[[3, 4], [6, 5]], nbr_sims=[[0.9, 0.8]] * 2,
                  event_ts=event_ts(2)),
     r"view 'unn', column 'nbr_ids', row 1: names the row's own user_id 5"),
    ("uagg-negative-count", "uagg", lambda: _uagg(count=[-1]),
     r"view 'uagg', column 'count', row 0: must be >= 1, got -1"),
    ("uagg-count-zero", "uagg", lambda: _uagg(count=[0]),
     r"view 'uagg', column 'count', row 0: must be >= 1, got 0"),
    ("uagg-window-start-after-its-end", "uagg", lambda: _uagg(window_start=[NOW + 60]),
     rf"view 'uagg', column 'window_start', row 0: {NOW + 60} is after the row's event time "
     rf"{NOW} \(the window's end\)"),
    ("nbr-similarity-not-a-cosine", "nbr", lambda: _nbr(similarity=[5.0]),
     r"view 'nbr', column 'similarity', row 0: must be <= 1.001, got 5.0"),
    ("nbr-similarity-below-minus-one", "nbr", lambda: _nbr(similarity=[-2.0]),
     r"view 'nbr', column 'similarity', row 0: must be >= -1.001, got -2.0"),
    ("nbr-no-neighbours-averaged", "nbr", lambda: _nbr(n_nbrs=[0]),
     r"view 'nbr', column 'n_nbrs', row 0: must be >= 1, got 0"),
    ("unn-neighbour-ids-as-strings", "unn", lambda: _unn(nbr_ids=[["3", "4"]]),
     r"view 'unn', column 'nbr_ids': must hold int64 values, got list<item: string>"),
    ("unn-similarities-as-strings", "unn", lambda: _unn(nbr_sims=[["0.9", "0.8"]]),
     r"view 'unn', column 'nbr_sims': must hold float values, got list<item: string>"),
    ("unn-similarity-not-a-cosine", "unn", lambda: _unn(nbr_sims=[[0.9, 3.0]]),
     r"view 'unn', column 'nbr_sims': holds values above 1.001"),
    ("uagg-vector-too-long", "uagg", lambda: _uagg(z_sum=[np.ones(Z_DIM + 1, np.float32)]),
     r"view 'uagg', column 'z_sum', row 0: expected 8 values, got 9"),
    ("rows-not-a-table", "pair", lambda: [1, 2, 3],
     r"view 'pair': rows must be a pyarrow Table or a pandas DataFrame, got list"),
    ("300-good-rows-then-one-bad", "pair", _many_good_then_one_bad,
     r"view 'pair', column 'z', row 300: expected 8 values, got 7"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("view", "rows", "message"),
    [c[1:] for c in MATERIALIZE_CASES],
    ids=[c[0] for c in MATERIALIZE_CASES],
)
def test_materialize_refuses_a_bad_batch_naming_view_column_and_row_and_writes_nothing(
    view: str, rows: Callable[[], object], message: str, feast_world: FeastWorld, unchanged
) -> None:
    with pytest.raises(InvalidWriteError, match=message) as caught:
        materialize(feast_world.store, view, rows(), batch_id="bad-batch")

    assert isinstance(caught.value, SolarisError) and isinstance(caught.value, ValueError)
    unchanged()


@pytest.mark.parametrize("batch_id", ["../escape", "b\n", "", "a b"])
def test_materialize_refuses_a_batch_id_that_is_not_a_file_name(
    batch_id: str, feast_world: FeastWorld, unchanged
) -> None:
    """``b\\n`` is the drill's case: ``$`` matched before the newline, which named a file."""
    with pytest.raises(
        InvalidWriteError, match=rf"batch_id must match .* got {re.escape(repr(batch_id))}"
    ):
        materialize(feast_world.store, "pair", pair_frame(), batch_id=batch_id)
    unchanged()


# --------------------------------------------------------------------------------------------
# Views the store cannot hold: TTLs and tags
# --------------------------------------------------------------------------------------------


def _pair_view(feast_world: FeastWorld, *, ttl: timedelta | None = None, **tags: str | None):
    view = copy.deepcopy(feast_world.store.get_feature_view("pair"))
    if ttl is not None:
        view.ttl = ttl
    for name, value in tags.items():
        key = f"solaris.{name}"
        if value is None:
            view.tags.pop(key, None)
        else:
            view.tags[key] = value
    return view


VIEW_CASES = [
    ("ttl-zero", {"ttl": timedelta(0)}, r"view 'pair': ttl \(its retention\) must be > 0, got 0 s"),
    ("ttl-negative", {"ttl": timedelta(hours=-1)},
     r"view 'pair': ttl \(its retention\) must be > 0, got -3600 s"),
    ("ttl-shorter-than-the-read-ttl", {"ttl": timedelta(seconds=10)},
     r"view 'pair': tag solaris\.read_ttl_s=21600 exceeds the view's ttl \(retention\) 10 s"),
    ("read-ttl-negative", {"read_ttl_s": "-5"},
     r"view 'pair': tag solaris\.read_ttl_s='-5' must be a positive integer"),
    ("read-ttl-not-a-number", {"read_ttl_s": "6h"},
     r"view 'pair': tag solaris\.read_ttl_s='6h' must be a positive integer"),
    ("z-dim-tag-missing", {"z_dim": None},
     r"view 'pair': tag solaris\.z_dim=None must be a positive integer"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("change", "message"), [c[1:] for c in VIEW_CASES], ids=[c[0] for c in VIEW_CASES]
)
def test_a_view_with_a_bad_ttl_or_tag_is_refused_naming_it_before_any_write(
    change: dict, message: str, feast_world: FeastWorld, unchanged
) -> None:
    view = _pair_view(feast_world, **change)
    online = online_store_of(feast_world.store)

    with pytest.raises(ViewDefinitionError, match=message) as caught:
        online.write_table(feast_world.store.config, view, pair_frame(2, user=2))

    assert isinstance(caught.value, SolarisError)
    unchanged()


def test_a_view_that_is_not_a_solaris_view_is_refused_naming_it(
    feast_world: FeastWorld, unchanged
) -> None:
    view = _pair_view(feast_world)
    view.name = "pairs"
    online = online_store_of(feast_world.store)
    with pytest.raises(ViewDefinitionError, match=r"unknown view 'pairs'"):
        online.write_table(feast_world.store.config, view, pair_frame(2, user=2))
    unchanged()


# --------------------------------------------------------------------------------------------
# Feast's write path: entity keys as Feast hands them over
# --------------------------------------------------------------------------------------------


def _key(user: Value, item: Value | None = None) -> EntityKey:
    values = [user] if item is None else [user, item]
    return EntityKey(join_keys=["user_id", "item_id"], entity_values=values)


def _features(z: list[float] | None = None) -> dict[str, Value]:
    return {
        "z": Value(float_list_val={"val": z if z is not None else [0.5] * Z_DIM}),
        "computed_at": Value(int64_val=NOW),
        "fm_version": Value(string_val=FM_VERSION),
    }


EVENT = datetime.fromtimestamp(NOW, UTC)
GOOD_ROW = (_key(Value(int64_val=2), Value(int64_val=20)), _features(), EVENT, None)

FEAST_CASES = [
    ("user-id-as-a-string", [GOOD_ROW, (_key(Value(string_val="7"), Value(int64_val=20)),
                                       _features(), EVENT, None)],
     r"view 'pair', column 'user_id', row 1: entity ids must be int64, got string_val"),
    ("item-id-as-a-float", [(_key(Value(int64_val=2), Value(double_val=20.0)), _features(),
                             EVENT, None)],
     r"view 'pair', column 'item_id', row 0: entity ids must be int64, got double_val"),
    ("fewer-entity-values-than-join-keys", [GOOD_ROW, (_key(Value(int64_val=2)), _features(),
                                                       EVENT, None)],
     r"view 'pair', row 1: the entity key names 2 join keys \['user_id', 'item_id'\] but "
     r"holds 1 values"),
    ("vector-too-short", [GOOD_ROW, (GOOD_ROW[0], _features([0.5] * 3), EVENT, None)],
     r"view 'pair', column 'z', row 1: expected 8 values, got 3"),
    ("vector-with-nan", [(GOOD_ROW[0], _features([0.5] * 7 + [float("nan")]), EVENT, None)],
     r"view 'pair', column 'z'"),
    ("feature-missing", [(GOOD_ROW[0], {"z": _features()["z"], "computed_at": Value(int64_val=NOW)},
                          EVENT, None)],
     r"view 'pair', column 'fm_version', row 0: is null"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("rows", "message"), [c[1:] for c in FEAST_CASES], ids=[c[0] for c in FEAST_CASES]
)
def test_feasts_write_path_refuses_bad_entity_keys_and_values_naming_them(
    rows: list, message: str, feast_world: FeastWorld, unchanged
) -> None:
    online = online_store_of(feast_world.store)
    view = feast_world.store.get_feature_view("pair")

    with pytest.raises(InvalidWriteError, match=message) as caught:
        online.online_write_batch(feast_world.store.config, view, rows, None)

    assert isinstance(caught.value, SolarisError)
    unchanged()


def test_feasts_write_to_online_store_refuses_a_vector_of_the_wrong_length(
    feast_world: FeastWorld, unchanged
) -> None:
    rows = pair_frame(2, user=2).assign(
        z=[vectors(1)[0], np.ones(Z_DIM + 2, np.float32)], computed_at=[NOW, NOW]
    )
    with pytest.raises(InvalidWriteError, match=r"view 'pair', column 'z', row 1: expected 8"):
        feast_world.store.write_to_online_store("pair", rows)
    unchanged()


def test_feasts_write_to_online_store_without_computed_at_names_it_and_writes_nothing(
    feast_world: FeastWorld, unchanged
) -> None:
    """The drill's case. Feast selects every feature column of the view before the store
    sees the rows, so on this path (unlike ``materialize``) ``computed_at`` must be given
    (docs/online_store_format.md): Feast's own KeyError names it, and nothing is written."""
    rows = pair_frame(2, user=2).assign(z=list(vectors(2)))
    assert "computed_at" not in rows
    with pytest.raises(KeyError, match="computed_at"):
        feast_world.store.write_to_online_store("pair", rows)
    unchanged()


def test_feasts_write_to_online_store_of_an_unknown_view_names_it_and_writes_nothing(
    feast_world: FeastWorld, unchanged
) -> None:
    """The drill's other case: a view name Feast does not know. Feast means to raise its
    FeatureViewNotFoundException, but looks the name up in a dict and catches the wrong
    exception, so its KeyError names the view; nothing is written."""
    rows = pair_frame(2, user=2).assign(z=list(vectors(2)), computed_at=[NOW, NOW])
    with pytest.raises(KeyError, match="pairs"):
        feast_world.store.write_to_online_store("pairs", rows)
    unchanged()


# --------------------------------------------------------------------------------------------
# The keys a write meets: one of another type, a Redis out of memory
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("view", "kind"), [("pair", "list"), ("uagg", "hash")])
def test_a_key_of_another_type_in_the_batch_is_named_and_nothing_of_the_batch_is_written(
    view: str, kind: str, feast_world: FeastWorld, snapshot_redis
) -> None:
    """The drill's case: a ``WRONGTYPE`` key among a batch's keys used to fail the batch
    half-way (the keys before it written) with an error naming no key."""
    from solaris.store.contract import VIEWS
    from solaris.store.keys import partition_key, view_key

    spec = VIEWS[view]
    bad = partition_key(view_key(feast_world.project, spec), spec, 250)
    client = feast_world.client
    if kind == "list":
        client.rpush(bad, b"not a hash")
    else:
        client.hset(bad, b"not", b"a string")
    frame = pd.concat([pair_frame(1, user=u, first_item=20) for u in range(200, 300)])
    if view == "uagg":
        n = len(frame)
        frame = pd.DataFrame(
            {
                "user_id": frame["user_id"].to_numpy(),
                "z_sum": vectors(n),
                "count": [1] * n,
                "window_start": [NOW - 3600] * n,
                "fm_version": [FM_VERSION] * n,
                "event_ts": event_ts(n),
            }
        )
    keys = snapshot_redis(client, feast_world.key_pattern)
    before = keys()
    try:
        with pytest.raises(
            InvalidWriteError,
            match=rf"view '{view}': 1 key\(s\) hold another "
            rf"Redis type .*{re.escape(bad)} \({kind}\)\. Nothing of the batch",
        ):
            materialize(feast_world.store, view, frame, batch_id="wrong-type")
        assert keys() == before
    finally:
        client.delete(bad)


def test_a_write_refused_for_memory_leaves_no_key_without_an_expiry(
    feast_world: FeastWorld,
) -> None:
    """The drill's case: ``maxmemory`` just above what Redis uses, ``noeviction``, a large
    write refused part-way; every key it left must expire (none did before: the touch
    script created a marker-only hash for each refused ``HSET`` and then set no expiry)."""
    import redis as redis_py

    from solaris.store.feast_store import open_feature_store
    from solaris.store.local_redis import embedded_redis

    with embedded_redis() as connection:
        admin = redis_py.Redis.from_url(f"redis://{connection}", socket_timeout=5)
        cfg = feast_world.cfg.model_copy(
            update={
                "store": feast_world.cfg.store.model_copy(
                    update={"redis": RedisTarget.parse(connection)}
                )
            }
        )
        store = open_feature_store(cfg, connection)
        online = online_store_of(store)
        table = store.get_feature_view("pair")
        online.write_table(store.config, table, pair_frame(50, user=1))  # scripts loaded
        used = int(admin.info("memory")["used_memory"])
        admin.config_set("maxmemory-policy", "noeviction")
        admin.config_set("maxmemory", used + 2_000_000)
        rows = pd.concat([pair_frame(20, user=u, first_item=20) for u in range(2, 3_002)])
        with pytest.raises(redis_py.exceptions.OutOfMemoryError):
            online.write_table(store.config, table, rows)
        keys = list(admin.scan_iter(match=f"{feast_world.project}:*", count=1000))
        assert len(keys) > 1  # some of the batch got in before memory ran out
        assert [k for k in keys if admin.pttl(k) < 0] == []
        admin.close()


class _CuttingProxy:
    """A loopback TCP relay to ``upstream`` that forwards the first ``limit`` bytes the
    client sends, then closes both sides (a writer killed, a connection dropped mid-write);
    the server's replies go back whole. Later connections are closed at once."""

    def __init__(self, upstream: tuple[str, int], limit: int) -> None:
        import socket
        import threading

        self.upstream, self.limit = upstream, limit
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.served = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.served:
                client.close()
                continue
            self.served = True
            server = socket.create_connection(self.upstream)
            threading.Thread(target=self._replies, args=(server, client), daemon=True).start()
            left = self.limit
            with contextlib.suppress(OSError):
                while left > 0:
                    data = client.recv(min(65536, left))
                    if not data:
                        break
                    server.sendall(data)
                    left -= len(data)
            for sock in (client, server):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    @staticmethod
    def _replies(server, client) -> None:
        with contextlib.suppress(OSError):
            while data := server.recv(65536):
                client.sendall(data)

    def close(self) -> None:
        self.listener.close()


def test_a_write_cut_anywhere_leaves_no_key_without_an_expiry(feast_world: FeastWorld) -> None:
    """The connection dropped after every few hundred bytes of a write of many users' hashes
    (the HSETs and expiries of one round trip, and of the next): whatever reached Redis, no
    key it holds lacks an expiry, because each key's commands are one transaction."""
    import redis as redis_py

    from solaris.store.feast_store import delete_project_keys, open_feature_store
    from solaris.store.local_redis import embedded_redis

    rows = pd.concat([pair_frame(20, user=u, first_item=20) for u in range(2, 80)])
    with embedded_redis() as connection:
        host, port = connection.split(",")[0].rsplit(":", 1)
        admin = redis_py.Redis(host=host, port=int(port), socket_timeout=5)
        view = None
        cuts = 0
        for limit in range(300, 160_000, 2_111):
            proxy = _CuttingProxy((host, int(port)), limit)
            try:
                address = f"127.0.0.1:{proxy.port}"
                cfg = feast_world.cfg.model_copy(
                    update={
                        "store": feast_world.cfg.store.model_copy(
                            update={"redis": RedisTarget.parse(address)}
                        )
                    }
                )
                store = open_feature_store(cfg, address)
                view = view or store.get_feature_view("pair")
                try:
                    online_store_of(store).write_table(store.config, view, rows)
                except (redis_py.ConnectionError, redis_py.TimeoutError, OSError):
                    cuts += 1
            finally:
                proxy.close()
            keys = list(admin.scan_iter(match=f"{feast_world.project}:*", count=1000))
            assert [k for k in keys if admin.pttl(k) < 0] == [], f"cut after {limit} bytes"
            delete_project_keys(admin, feast_world.project)
        assert cuts > 10  # the cuts fell inside the write, not after it
        admin.close()
