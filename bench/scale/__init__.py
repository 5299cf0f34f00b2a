"""Cost growth of the SOLARIS cycle with traffic: the cycle's tasks, partitioned by user.

Run: ``.venv/bin/python -m bench.scale`` (N = 10^5, 10^6 and 10^7 candidate rows per
interval; ``--sizes 1e5,1e6`` to pick, ``--quick`` for 10^4 and 10^5). Redis at
``127.0.0.1:6379``, database 13 (``--redis`` for another), under a namespace (Feast project)
of its own, ``bscale<pid>``, whose keys and request streams are deleted before each run and
at the end; no database is flushed. Everything else lives in a temporary directory that is
removed at the end.

Why: the cycle runs once per scheduling interval, so what must scale is the work of one
interval against the traffic of that interval, and with the cycle partitioned by user
(``cycle.partitions``, :mod:`solaris.store.partitions`) each task must hold one partition's
rows, whatever N is. For each N the bench sets the partition count so that the rows per
partition stay about constant, ``P = max(1, round(N / --rows-per-partition))`` (default
500,000 rows: P = 1 at 10^5, 2 at 10^6, 20 at 10^7, exactly 500,000 rows a partition from
10^6 on, so that the exponents compare partitions of one size), and runs the cycle's **real task
functions** on a real cycle state (the namespace's folder under the temporary directory, the
real Redis), **each task in a process of its own**, as an Airflow worker runs it. Every task
process is a fresh ``python -m bench.scale --child``: it reads what the earlier tasks wrote to
the cycle state and returns its result (the XCom) as JSON.

The traffic (not a cycle stage): one interval of seeded synthetic candidates
(:func:`solaris.data.synthetic.generate_candidates`, its default shape: 100,000 users, 50,000
items, Zipf popularity, 200 candidates per request, 60% recurrence; the requests spread over
the ``selection.cadence_minutes`` interval), generated chunk by chunk in one **generator**
process and split by partition into one parquet file per partition, never concatenated.
Then, per N:

- **history** (one process, set-up): the autoencoder and its manifest in the models folder,
  and the steady state's ledger cache: ``--cache-intervals`` earlier intervals (default
  TTL / cadence = 24), each with a ledger of ``share ×`` the partition's rows per partition,
  sampled from the traffic with user ids shifted out of its range (they cost the lookup and
  skip nothing, so every N selects the same share), and a completion marker without shards
  (so the embeddings run does not plan them and the enrichment reads only this interval's
  codes).
- **serving** (one process, not a cycle task): every request is logged as serving logs it,
  :func:`solaris.serving.request_log.append_request` into its user's partition's request
  stream (``Namespace.request_stream_of``), with a logged score.

The cycle's stages, each a sequence of steps; a step's tasks are independent processes:

1. **selection** (``orchestration.candidates``): ``prepare_interval`` (the miss drain, the
   partitions grouped by their streams' lengths, ``cycle.select_requests`` set to half a
   partition's requests so each partition is a task); one ``select_partitions`` task per
   group (drain the partition's stream into its request log, score with the verifier, select
   ``selection.share`` of each request against the partition's own ledger cache, write the
   partition's ledger); ``finish_interval`` (the run record). With one group the DAG does it
   all in its first task, and so does the bench.
2. **embedding** (``orchestration.embeddings``): ``plan_shards`` (reads the interval's
   ledgers, writes the shards by partition, ``cycle.shard_rows`` = ``share × rows per
   partition``, so a shard is about a partition's pairs); one task per shard group (shards of
   about that many pairs together) running ``embed_and_materialize`` per shard: the FM
   (adapter) → its shared layer → the autoencoder → ``z`` on CPU, then the ``pair`` view
   written (Redis, offline rows); ``summarize_embeddings`` (the marker: the codes published).
3. **enrichment** (``orchestration.enrichment``): ``partition_groups`` (``cycle.enrich_rows``
   set to half a partition's codes, so each partition is a task); one
   ``aggregate_partitions`` task per group (its users' ``uagg``, its ``iagg`` partial sums,
   its users' embeddings); one task of ``reduce_aggregates`` (``iagg``) and
   ``build_neighbour_index`` (the user KNN index over every partition's users); one
   ``fill_partitions`` task per group (its users' ``unn`` and ``nbr`` for its candidates); one
   ``record_neighbours`` task. With one group everything runs in the first task, as the DAG
   does. The clustering DAG's daily table is not built: with
   ``cycle.neighbours_every_interval`` (the default) the per-interval index replaces it.

The adapters are the bench's own (``bench.scale:foundation_model`` and
``bench.scale:verifier``): the example's untrained, seeded
:class:`~solaris.examples.synthetic.PairTowerFM` and its
:class:`~solaris.examples.synthetic.RecurrenceVerifier`, whose features are counters of a log
(:class:`~solaris.examples.synthetic.LogFeatures`). Each task process indexes the traffic of
its own partitions (the parent names them in ``BENCH_SCALE_PARTITIONS``), one partition at a
time as the cycle's tasks ask for them (:class:`PartitionLogs`): user and pair counters are
exact, item counters are those of the partition's traffic. A real FM serves its
item features from its own store; indexing the whole interval in every process would be the
example adapter's memory, not the cycle's. Their cost does not depend on their weights.

Figures. A stage's **seconds** are the sum of its tasks' timed calls (imports and process
starts left out: a task process imports what it needs, Feast, torch, faiss, before its
timed calls); its **wall** is the sum of its steps' walls, each from its first task's start
to its last task's end (process starts and imports in); **rows/s** is N / seconds. The
calls' **CPU seconds** (user + system of every thread, ``getrusage``) are shown too: on a
machine other work shares they move much less than seconds. Each stage also shows the
machine's mean 1-minute load average while it ran (sampled each second). Memory is
each process's resident set: a process's peak is the highest ``VmHWM`` it read, before each
reset and at its end (a timed call's peak is its own: ``VmHWM`` is reset through
``/proc/self/clear_refs`` before it; tracemalloc would miss numpy's and torch's buffers).
``wait4``'s ``ru_maxrss`` is not used: for a child started by ``vfork`` + ``exec`` Linux
records the parent's high-water mark in it, so every child would report the parent's RSS.
The exponent ``b`` of ``cost ~ N^b`` is a least-squares fit of ``log seconds`` on ``log N``
over the sizes run, and over the last two. Every task runs alone (a pool of one process)
unless stated; at the largest size the whole interval runs again with a pool of two
concurrent processes (what two workers do on a machine of this size) against the first run.
A task process gets the cores divided by the processes that run at once as its OpenMP
threads (``OMP_NUM_THREADS`` for torch and faiss; ``--threads`` to fix it).

**Embedding against the FM's own pass**, on the pairs of the first shard in the same
8,192-row batches, ``--reps`` interleaved repetitions in a shuffled order after a warm-up,
median per variant: ``cycle embed_pairs`` against the **bare FM pass** (per batch
``fm.shared(fm.features(...))`` then ``autoencoder.encode``, under ``inference_mode``, the
codes kept as tensors); target a throughput ratio ≥ 0.7. The **forward-only** variant
(features built beforehand) shows how much of the FM's pass is its feature lookup.

The package, by stage: :mod:`bench.scale.common` (settings and pure helpers),
:mod:`bench.scale.meter` (a process's seconds and memory), :mod:`bench.scale.adapters` (the
FM and the verifier), :mod:`bench.scale.jobs` (a size's job and its tasks), the tasks of each
stage (:mod:`bench.scale.traffic`: the generator, the history and serving;
:mod:`bench.scale.selection`; :mod:`bench.scale.embedding`, with the ratio;
:mod:`bench.scale.enrichment`), :mod:`bench.scale.child` (a task process),
:mod:`bench.scale.runner` (the parent's pool and the stages in order),
:mod:`bench.scale.tables` (the report) and :mod:`bench.scale.cli` (the arguments, the
workspace, a size's run, ``main``; ``python -m bench.scale`` runs it).
"""

from __future__ import annotations

from bench.scale.adapters import PartitionLogs, foundation_model, verifier
from bench.scale.cli import main, size_config
from bench.scale.common import (
    FULL_SIZES,
    QUICK_SIZES,
    STAGES,
    compact_peaks,
    fit_exponent,
    group_shards,
    parse_sizes,
    partition_count,
    threads_per_task,
)
from bench.scale.jobs import Job
from bench.scale.meter import Part
from bench.scale.traffic import user_pool

__all__ = [
    "FULL_SIZES",
    "QUICK_SIZES",
    "STAGES",
    "Job",
    "Part",
    "PartitionLogs",
    "compact_peaks",
    "fit_exponent",
    "foundation_model",
    "group_shards",
    "main",
    "parse_sizes",
    "partition_count",
    "size_config",
    "threads_per_task",
    "user_pool",
    "verifier",
]
