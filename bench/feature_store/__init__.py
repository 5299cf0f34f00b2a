"""Feature-store benchmark of the SOLARIS online store (``solaris.store.online``).

Run: ``.venv/bin/python -m bench.feature_store`` (Redis at ``127.0.0.1:6379``, database 13;
override with ``--redis``; ``--quick`` for a smoke run). Every speed figure is a ratio of
variants measured side by side in this one run, because the machines are noisy: repetitions
are interleaved in a shuffled order after a warm-up, and p50/p99 are taken per variant.
Nothing here calls ``gc.freeze``.

Set-up: one user × ``N`` candidates (``--candidates``, 300; ``d`` = ``--dim``, 32) with all
four serving views (pair, nbr, uagg, iagg) written through ``SolarisOnlineStore.write_table``
in the bench's own Feast project ``bsol<pid>``; the same rows in Feast's own Redis online
store (``online_store: {type: redis}``) in project ``bstk<pid>`` with the previous per-pair
layout (vectors as float16/float32 ``Bytes``, :func:`stock_definitions`). Hash fields are
the store's 8-byte little-endian member ids (``keys.member_fields``). Every variant is
checked to return the written values before anything is timed.

1. **Fetch latency** (p50/p99 ms) on the ``--redis`` server: ``client``
   (``SolarisFeatures.fetch``, store opened by the client itself, after ``warm_up``) ·
   ``feast get_online_features`` on the SOLARIS store (the FeatureService, no ``to_dict``)
   and the same ``+ to_dict`` · ``stock feast + to_dict`` (one FeatureService call on the old
   layout) · ``raw pipeline``, the floor: a redis-py pipeline (``execute_command``, the
   fields as 8-byte ``bytes``) of exactly the commands the store sends, no decoding · ``raw
   packed``: the store's own bytes (``SolarisOnlineStore.request_commands``) on a pooled
   redis-py connection, i.e. the floor without redis-py's pipeline packing · ``wire``: the
   same bytes on a plain socket, every reply read back by hiredis, nothing else
   (:class:`~bench.feature_store.fetch.Wire`; the serving issue's floor: client/wire ≤ 2 at
   p50, ≤ 2.5 at p99). The set-up checks that redis-py packs the raw pipeline's commands to
   the store's bytes. Targets: client/floor ≤ 2 at p50 and ≤ 3 at p99; stock/client ≥ 20. A
   **second block** times ``client``, ``feast get_online_features``, ``raw pipeline`` and
   ``raw packed`` on a private
   ``embedded_redis()``, which applies ``keys.SERVER_SETTINGS`` (hash-max-ziplist-value 256,
   -entries 512; the 300-field hashes are listpacks there), in a project of its own
   (``bemb<pid>``). **1c** times the client, the two redis-py floors and the wire
   interleaved with each other only. The Feast variants share the client's Registry object
   (:func:`share_registry`). **1b** times the client's fetch right after a
   ``get_online_features`` on a second FeatureStore (another Registry object) against right
   after the same call on its own store: the store caches its plan per Registry object, so
   little or no penalty is expected. Garbage collections during the timed runs are counted
   (``gc.callbacks``), not prevented.
2. **Concurrency**: ``--threads`` (16) threads calling ``fetch`` on one ``SolarisFeatures``
   for ``--concurrency-seconds`` (60): requests/s, share with full features, exceptions,
   client stats, latency under load; single-thread requests/s of the client and of stock
   Feast for ``--single-seconds`` (10). Target: aggregate / stock single-thread ≥ 5.
3. **Online writes** of ``--write-rows`` (50,000) pair rows, 50 per user, in shuffled row
   order, median of ``--write-reps`` (3) interleaved rounds, each round newer event times:
   ``bulk write_table`` (the whole call: validation, encoding, writing; per key the store
   sends one transaction: ``MULTI``, its ``HSET``s, ``HSETNX`` of the prune marker,
   ``PEXPIRE``, ``HGET`` of the marker, ``EXEC``) · ``feast
   write_to_online_store`` on the SOLARIS store · ``stock feast write_to_online_store`` ·
   ``raw pipeline``, the floor: a redis-py pipeline of ``HSET key <8-byte field, record>...``
   + ``PEXPIRE key ms`` per user key, records pre-encoded (``codec.encode_records``), 1,000
   keys per pipeline · ``raw + transaction`` (information: the store's transaction per key,
   i.e. exactly the commands of the store's write, checked byte for byte against them
   before timing). Target: bulk/raw ≥ 0.6.
4. **Redis bytes per cached pair**: ``solaris.store.footprint.view_footprint`` (``MEMORY
   USAGE key SAMPLES 0`` summed over the pair keys / rows; prune markers are not rows) against
   the record size, on the running Redis and on a private ``embedded_redis()`` (which applies
   ``keys.SERVER_SETTINGS``), for 1 user × 300, ``--memory-users`` (1,000) × 50 and × 120
   pairs (each population in a project of its own, ``bm0``/``bm1``/``bm2`` + pid), plus stock
   Feast's layout for 300 pairs. The servers' value and entries limits (``CONFIG GET``) and
   the keys' encodings are printed. Target: ≤ 1.5 × the record under the recommended setting.
5. **Where the time goes**: cProfile of ``--profile-calls`` (200) client fetches, top 15
   functions by own time.

The sections live in their own modules (``context``: stores, projects, rows and the shared
helpers; ``fetch``: 1, 1b, 1c; ``concurrency``: 2; ``writes``: 3; ``memory``: 4;
``profiling``: 5); ``__main__`` runs them in order and prints the report. The bytes the
store puts on the wire come from its public methods: the read path's from
``SolarisOnlineStore.request_commands``, the write path's from ``write_commands``; the bench
reaches into no private function of the store.

Keys of the bench's projects (``bsol``, ``braw``, ``btch``, ``bm0``-``bm2``, ``bstk`` + pid,
the miss streams) are deleted at the start and the end; nothing else in the database is
touched, and no database is flushed. Repo copies live in a temporary directory.
"""

from bench.feature_store.context import (
    FM_VERSION,
    REDIS_DEFAULT,
    REPO,
    Bench,
    bench_context,
    request_data,
    write_request,
)
from bench.feature_store.fetch import open_client

__all__ = [
    "FM_VERSION",
    "REDIS_DEFAULT",
    "REPO",
    "Bench",
    "bench_context",
    "open_client",
    "request_data",
    "write_request",
]
