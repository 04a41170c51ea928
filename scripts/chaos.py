"""Three real daemons on one SeaweedFS under a random schedule of faults, then what must hold.

One run, in order, on a SeaweedFS of its own (`weed mini` on loopback):

* three daemons (separate `dreamcycle run` processes), each holding the same small store
  (`--chunks` paragraphs of the standard library's documentation), all trusting one
  keyring, downscale and the sweep off (salience moves only through pulses), roll-ups and
  compaction on. Each daemon reads its time from a clock file of its own
  (`clock.source = "file"`, daemon/clock.py), which this script keeps at the real time
  plus that peer's skew (none unless a skew is under way);
* for `--minutes` (or `--seconds`), pulses and outcomes queued on random peers at random
  times, through the functions `pulse-emit` and `recall` run (scripts/mesh_load.py), also
  on a peer whose daemon is down: each is acknowledged once its entry is committed to the
  peer's outbox, and recorded;
* meanwhile faults at random times, each kind once in a first round, then drawn at random
  (`--fault-every-s` apart on average; in runs shorter than ten minutes each lasts
  proportionally less, down to a quarter):
  - forged objects written straight to the bucket with boto3 (never over an existing
    object): unsigned segments under a real peer's name and under made-up names (a
    Reward pulse and a tombstone of real chunks in each); junk bytes at segment keys;
    oversized objects (past the compressed size, the decompressed size or the line count
    this mesh is configured with); garbage claim files `claim/<peer>/<seq>` at a peer's
    next sequence numbers; unsigned segments keyed up to an hour ahead (one in four
    beyond the hour); unsigned snapshots; a real segment copied under other keys;
  - junk at the segment key a peer's fresh claim names: the peer restarted (SIGTERM)
    behind tests/test_mesh_hostile.py's ClaimRacingProxy, which writes junk there as soon
    as the server accepts the claim, one of its pulses queued, then the peer restarted on
    the bucket directly;
  - keyring churn: the keyring file removed for a few seconds, then a half-written copy
    of it for a few seconds, then the whole file again (with `--keyring-churn
    not-during-start`, only while no daemon is starting: until it logs that it is ready);
  - S3 outages: SeaweedFS stopped for some seconds, then started again on the same ports
    and data directory (local_servers.RunningS3.restart); not during a junk race, whose
    proxy stops accepting connections once the server is gone;
  - kill -9 of a random peer, started again a few seconds later;
  - clock skew: one peer's clock moved ahead or back by up to `--max-skew-s` for a minute
    or two, then set right (below the zeitgeist's window, which must exceed clock skew:
    zeitgeist/defaults.py);
* then the faults stop (the keyring whole, SeaweedFS up, clocks right, every peer running
  on the bucket directly), the peers catch up (for at most `--settle-s`), the daemons are
  stopped, and each peer's database is read, as scripts/mesh_check.py reads it, for the
  checks:
  1. salience: each peer's salience is what replaying its own order of pulses gives, bit
     for bit, over the chunks every peer holds, and the peers agree bit for bit whatever
     order they applied the pulses in (salience is kept on a grid where sums are exact),
     except on a chunk a clamp at 0 or 1 touched (mesh_check.compare_replicas);
  2. nothing acknowledged lost: every pulse acknowledged, and every pulse an acknowledged
     outcome became on its peer, applied exactly once on every peer, and nothing else;
  3. every peer kept cycling: its count of cycles grew while the faults ran, no stretch
     without a cycle was longer than `--max-stall-s`, and no daemon exited on its own;
  4. bounded: each daemon's peak resident memory (VmHWM, sampled from /proc) and each
     database with its write-ahead log stayed within `--max-rss-mib` and `--max-db-mib`;
  5. the forgeries changed nothing: no forged entry applied, no chunk tombstoned.

The schedule (when each fault and item comes, what it picks) is drawn from `--seed`; how
the daemons' cycles interleave with it is the machine's. Left out on purpose: no daemon
is started while the keyring file is missing or half-written (it waits for the whole
file): one started without the file trusts only its own key, and one started on a
half-written file refuses to start, as documented (SECURITY.md). A daemon reads the file
again later in its start-up, when it opens its store; churn at that moment is in the
run unless `--keyring-churn not-during-start` keeps it out.

Results: three tables (per peer, faults by kind, checks), and JSON at `--out` (default
bench-results/chaos.json) with a description of the machine, the seed, the options, the
counts of each fault, what was acknowledged, the refusals each daemon counted and each
check's result. Exit status 0 when every check holds, 1 when one does not (or the mesh
could not be started), 2 for bad arguments.

    .venv/bin/python scripts/chaos.py [--minutes 20] [--seed 1] [--out bench-results/chaos.json]
    .venv/bin/python scripts/chaos.py --seconds 40 --interval 1 --fault-every-s 2 --chunks 20

One file: one run of one mesh, its schedule, its faults and its checks, set up for that run;
what other mesh runs share is in mesh_peers.py, mesh_load.py and mesh_check.py.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gzip
import heapq
import itertools
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import apsw
import numpy as np
from botocore.exceptions import BotoCoreError, ClientError

from dreamcycle.daemon.clock import FileClock, SystemClock
from dreamcycle.daemon.defaults import (
    PULSE_DECAY_PER_HOP,
    PULSE_K,
    PULSE_MAX_HOPS,
    PULSE_SIGMA,
    PULSE_TTL_S,
    ZEITGEIST_WINDOW_S,
)
from dreamcycle.daemon.defaults import PULSE_STRENGTH as FORGED_STRENGTH
from dreamcycle.pulses.pulse import PulseKind, SalientPulse
from dreamcycle.zeitgeist.entries import (
    Entry,
    OutcomeEntry,
    PulseEntry,
    TombstoneEntry,
    encode_segment,
)
from dreamcycle.zeitgeist.hlc import hlc_from_ms
from dreamcycle.zeitgeist.object_keys import (
    CLAIM_PREFIX,
    SEGMENT_PREFIX,
    SEQ_MAX,
    claim_key,
    is_rollup_key,
    parse_claim_key,
    parse_segment_key,
    segment_key,
    segment_listing_start,
    snapshot_key,
)
from scripts.bench_common import (
    BenchmarkError,
    Column,
    describe_machine,
    machine_summary,
    print_table,
    write_json,
)
from scripts.local_servers import RunningS3, ServerStartError, pick_free_ports, start_seaweedfs
from scripts.mesh_check import (
    Settled,
    agreement,
    bit_identical_replay,
    compare_replicas,
    exactly_once,
    originated_pulses,
)
from scripts.mesh_load import Emitter, documentation_rows, write_rows
from scripts.mesh_peers import MeshPeer, admitted, ingest_all, mesh_settings, wait_for
from tests.test_mesh_hostile import ClaimRacingProxy

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

DEFAULT_OUT: Final = Path("bench-results/chaos.json")
PEERS: Final = 3
MADE_UP_NAMES: Final = ("mallory", "trent", "zz_ghost")
#: One item in this many is an outcome (a recorded recall and its result); the rest pulses.
OUTCOME_EVERY: Final = 5
START_TIMEOUT_S: Final = 600.0
#: The clock files are rewritten this often.
CLOCK_TICK_S: Final = 0.02
#: Memory, database size and cycles are sampled this often; refusals scraped every few.
SAMPLE_EVERY_S: Final = 2.0
SCRAPES_EVERY_SAMPLES: Final = 5
SCHEDULER_TICK_S: Final = 0.2
#: A fault that cannot begin yet (its conditions unmet) is tried again this much later.
POSTPONE_S: Final = 1.0
#: Polls (a second apart) the expected pulses must stay the same for the mesh to be settled.
SETTLE_POLLS: Final = 10
#: The mesh's limits on a segment read (zeitgeist.max_segment_*): low enough that an
#: oversized object costs little to write, far above what these peers publish.
MAX_SEGMENT_BYTES: Final = 4 * 1024 * 1024
MAX_SEGMENT_EXPANDED_BYTES: Final = 32 * 1024 * 1024
MAX_SEGMENT_LINES: Final = 20_000
MIB: Final = 1024 * 1024
REJECTED_METRIC: Final = "dreamcycle_entries_rejected_total"
#: How long each fault lasts, seconds: (low, high) of a uniform draw, for runs of
#: FULL_SCALE_S of faults or more; shorter runs scale them down, to MIN_SCALE at most.
FULL_SCALE_S: Final = 600.0
MIN_SCALE: Final = 0.25
KILL_DOWN_S: Final = (2.0, 10.0)
OUTAGE_S: Final = (5.0, 25.0)
KEYRING_PHASE_S: Final = (2.0, 6.0)
SKEW_FOR_S: Final = (20.0, 120.0)
#: The first round (every kind once) comes within this share of the run.
FIRST_ROUND_SHARE: Final = 0.6
#: What a daemon logs once it has read its keys and opened its store.
READY_LINE: Final = b"daemon ready"
#: A junk race ends once its junk landed, or after this long.
RACE_LIMIT_S: Final = 60.0
RACE_CHECK_S: Final = 1.0
#: Garbage claims written at a peer's next sequence numbers, at most.
MAX_GARBAGE_CLAIMS: Final = 20
#: Forged segments keyed this far ahead: within the allowed skew (one hour), or beyond it.
FUTURE_WITHIN_S: Final = (60.0, 3_540.0)
FUTURE_BEYOND_S: Final = (3_660.0, 7_200.0)
#: Real segments copied are looked for among those of the last minute.
COPY_LOOKBACK_MS: Final = 60_000
JUNK_BYTES: Final = (16, 4096)
#: The faults, each counted by this name.
FORGERIES: Final = (
    "unsigned_segment_real_name",
    "unsigned_segment_made_up_name",
    "junk_segment",
    "oversized_object",
    "garbage_claims",
    "junk_at_claimed_segment",
    "future_dated_segment",
    "unsigned_snapshot",
    "copied_segment",
)
FAULTS: Final = (*FORGERIES, "keyring_churn", "s3_outage", "kill_9", "clock_skew")
#: Attempts at starting SeaweedFS again when the faults stop.
RESTART_ATTEMPTS: Final = 5


@dataclass(frozen=True)
class Ack:
    """An item queued and acknowledged: its entry committed to the peer's outbox."""

    peer: str
    kind: str  # "pulse" or "outcome"
    entry_id: str
    at_s: float


@dataclass(order=True)
class Event:
    """A step of the schedule: `action()` returns False when it cannot happen yet."""

    due_s: float
    seq: int
    name: str = field(compare=False)
    action: Callable[[], bool] = field(compare=False)
    #: Ends a fault under way (run at once when the faults stop), rather than beginning one.
    ending: bool = field(compare=False, default=False)


def plan(seed: int, fault_s: float, every_s: float) -> list[tuple[float, str, int]]:
    """(time, fault, seed of its own draws): every kind once in a first round, in a random
    order within the first FIRST_ROUND_SHARE of `fault_s`, then a random kind at a time,
    `every_s` apart on average, until 90 % of `fault_s`."""
    rng = random.Random(seed)
    kinds = list(FAULTS)
    rng.shuffle(kinds)
    first_round_s = min(FIRST_ROUND_SHARE * fault_s, len(kinds) * every_s)
    times = sorted(rng.uniform(0.02, 1.0) * first_round_s for _ in kinds)
    planned = [(at, kind, rng.getrandbits(32)) for at, kind in zip(times, kinds, strict=True)]
    at = first_round_s
    while True:
        at += rng.expovariate(1.0 / every_s)
        if at >= 0.9 * fault_s:
            return planned
        planned.append((at, rng.choice(FAULTS), rng.getrandbits(32)))


class Clocks:
    """Each peer's clock file, rewritten every CLOCK_TICK_S with the real time plus that
    peer's skew."""

    def __init__(self, root: Path, names: Sequence[str]) -> None:
        self.files = {name: FileClock(root / f"{name}.clock") for name in names}
        self.skew_ms = dict.fromkeys(names, 0)
        self._stop = threading.Event()
        self.tick()
        self._thread = threading.Thread(target=self._run, name="clocks", daemon=True)
        self._thread.start()

    def settings(self, name: str) -> dict[str, str]:
        return {
            "DREAMCYCLE_CLOCK_SOURCE": "file",
            "DREAMCYCLE_CLOCK_FILE": str(self.files[name].path),
        }

    def tick(self) -> None:
        now = SystemClock().now_ms()
        for name, clock in self.files.items():
            clock.set(now + self.skew_ms[name])

    def _run(self) -> None:
        while not self._stop.wait(CLOCK_TICK_S):
            self.tick()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class Keyring:
    """The shared keyring file: whole, missing, or half-written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.saved = path.read_bytes()
        self.state = "whole"

    def remove(self) -> None:
        self.saved = self.path.read_bytes()
        self.path.unlink()
        self.state = "missing"

    def half_written(self) -> None:
        """The first half of the file, written in place, as a copy caught mid-write."""
        with self.path.open("wb") as out:
            out.write(self.saved[: len(self.saved) // 2])
        self.state = "half"

    def restore(self) -> None:
        scratch = self.path.with_name(f".{self.path.name}.chaos")
        scratch.write_bytes(self.saved)
        os.replace(scratch, self.path)
        self.state = "whole"


@dataclass
class Race:
    """A junk race under way: `peer` behind `proxy` until its junk landed or `until_s`."""

    peer: MeshPeer
    proxy: ClaimRacingProxy
    armed: int
    until_s: float


@dataclass
class PeerWatch:
    """What was sampled of one peer during the run."""

    max_rss_kib: int = 0
    max_db_bytes: int = 0
    #: (seconds since the faults began, cycles done) at each sample that could read them.
    cycles: list[tuple[float, int]] = field(default_factory=list)
    #: What each of its daemon processes (by pid) counted, at the last scrape.
    rejected: dict[int, dict[str, float]] = field(default_factory=dict)
    starts: int = 0
    stops: list[int | None] = field(default_factory=list)


class Chaos:
    """One mesh under faults: its peers, bucket, schedule, and what was recorded."""

    def __init__(self, args: argparse.Namespace, root: Path, server: RunningS3) -> None:
        self.args = args
        self.root = root
        self.server = server
        self.prefix = f"chaos-{int(time.time())}"
        names = [f"p{i}" for i in range(PEERS)]
        self.clocks = Clocks(root, names)
        credentials = {"AWS_ACCESS_KEY_ID": server.access_key_id,
                       "AWS_SECRET_ACCESS_KEY": server.secret_access_key}  # fmt: skip
        settings = mesh_settings(server.bucket, self.prefix, server.endpoint_url, credentials) | {
            "DREAMCYCLE_ZEITGEIST_COMPACTION_INTERVAL_S": str(args.compaction_s),
            "DREAMCYCLE_ZEITGEIST_MAX_SEGMENT_BYTES": str(MAX_SEGMENT_BYTES),
            "DREAMCYCLE_ZEITGEIST_MAX_SEGMENT_EXPANDED_BYTES": str(MAX_SEGMENT_EXPANDED_BYTES),
            "DREAMCYCLE_ZEITGEIST_MAX_SEGMENT_LINES": str(MAX_SEGMENT_LINES),
            "DREAMCYCLE_DOWNSCALE_ENABLED": "false",
            "DREAMCYCLE_SWEEP_ENABLED": "false",
        }  # fmt: skip
        ports = pick_free_ports(PEERS)
        self.peers = [
            MeshPeer(root, name, settings | self.clocks.settings(name), port)
            for name, port in zip(names, ports, strict=True)
        ]
        self.watch = {p.peer_id: PeerWatch() for p in self.peers}
        self.chunks = write_rows(root / "chunks.jsonl", documentation_rows(args.chunks))
        self.keyring: Keyring | None = None
        self.emitters: dict[str, Emitter] = {}
        self.emit_lock = threading.Lock()
        self.acks: list[Ack] = []
        self.emit_failures: list[str] = []
        self.forged_ids: set[str] = set()
        self.forged_keys: set[str] = set()
        self.injected: Counter[str] = Counter()
        self.objects: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self.events: list[dict[str, Any]] = []
        self.unexpected_exits: list[dict[str, Any]] = []
        self.queue: list[Event] = []
        self.counter = itertools.count()
        self.down: set[str] = set()
        self.s3_down = False
        self.race: Race | None = None
        self.started = time.monotonic()
        self.fault_end_s = 0.0
        self.sampling = threading.Event()
        self.count_lock = threading.Lock()
        self.seeds: list[tuple[str, np.ndarray[Any, Any], str]] = []
        self._s3: S3Client | None = None
        self.scale = min(1.0, max(MIN_SCALE, args.fault_s / FULL_SCALE_S))
        #: Peers started and not ready yet: where their log stood at the start.
        self.starting: dict[str, int] = {}

    # ---- bookkeeping -----------------------------------------------------------------------

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def event(self, what: str) -> None:
        print(f"[{self.elapsed():7.1f} s] {what}", flush=True)
        self.events.append({"at_s": round(self.elapsed(), 1), "what": what})

    def push(self, due_s: float, name: str, action: Callable[[], bool], *, ending: bool) -> None:
        heapq.heappush(self.queue, Event(due_s, next(self.counter), name, action, ending))

    # ---- the mesh ------------------------------------------------------------------------

    def setup(self) -> None:
        ingest_all(self.peers, self.chunks)
        for peer in self.peers:
            self.start(peer)
        wait_for(lambda: all(admitted(p, self.args.chunks) for p in self.peers),
                 "every peer to admit its chunks", START_TIMEOUT_S, lambda: self.peers)  # fmt: skip
        # Provisioned by the first start: the keyring now lists every peer's key.
        self.keyring = Keyring(self.peers[0].keyring_path)
        self.emitters = {
            p.peer_id: Emitter(p, seed=self.args.seed * 100 + n) for n, p in enumerate(self.peers)
        }
        rows = self.peers[0].query(
            "SELECT content_hash, embedding, index_version FROM observations "
            "WHERE admitted_seq IS NOT NULL AND embedding IS NOT NULL AND type != 'efficacy' "
            "ORDER BY id"
        )
        self.seeds = [(str(h), np.frombuffer(bytes(b), dtype="<f4"), str(v)) for h, b, v in rows]
        self.event(f"{PEERS} daemons ready, {len(self.seeds)} chunks each")

    def start(self, peer: MeshPeer) -> None:
        self.starting[peer.peer_id] = peer.log_path.stat().st_size if peer.log_path.exists() else 0
        peer.start(self.args.interval)
        self.watch[peer.peer_id].starts += 1
        self.down.discard(peer.peer_id)

    def all_ready(self) -> bool:
        """Whether every daemon started has read its keyring and opened its store (logged
        READY_LINE since its start), or stopped."""
        for name, offset in list(self.starting.items()):
            peer = next(p for p in self.peers if p.peer_id == name)
            with peer.log_path.open("rb") as log:
                log.seek(offset)
                if READY_LINE in log.read() or not peer.running():
                    del self.starting[name]
        return not self.starting

    def draw_s(self, rng: random.Random, span: tuple[float, float]) -> float:
        """How long a fault lasts: drawn from `span`, scaled down for short runs."""
        return float(rng.uniform(*span) * self.scale)

    def scrape(self, peer: MeshPeer) -> None:
        """What the daemon counted so far (kept per process: a new one counts from 0)."""
        process = peer.process
        if process is None or not peer.running():
            return
        counted = peer.counter(REJECTED_METRIC, "reason")
        with self.count_lock:
            kept = self.watch[peer.peer_id].rejected.setdefault(process.pid, {})
            for reason, count in counted.items():
                kept[reason] = max(kept.get(reason, 0.0), count)

    def stop(self, peer: MeshPeer) -> None:
        """SIGTERM (SIGKILL past the stop deadline), its exit code kept."""
        self.scrape(peer)
        try:
            code: int | None = peer.stop()
        except subprocess.TimeoutExpired:
            peer.kill()
            code = None
        self.watch[peer.peer_id].stops.append(code)

    def running(self) -> list[MeshPeer]:
        return [p for p in self.peers if p.peer_id not in self.down and p.running()]

    def s3(self) -> S3Client:
        if self._s3 is None:
            self._s3 = self.server.backend(self.prefix).client
        return self._s3

    # ---- what is queued ------------------------------------------------------------------

    def acknowledge(self, peer: MeshPeer, kind: str) -> None:
        emitter = self.emitters[peer.peer_id]
        with self.emit_lock:
            try:
                entry_id = emitter.outcome() if kind == "outcome" else emitter.pulse()
            except Exception as exc:  # not acknowledged: recorded, not counted as lost
                self.emit_failures.append(f"{peer.peer_id} {kind}: {type(exc).__name__}: {exc}")
                return
            self.acks.append(Ack(peer.peer_id, kind, entry_id, round(self.elapsed(), 2)))

    def emit_loop(self, stop: threading.Event) -> None:
        rng = random.Random(f"{self.args.seed}/items")
        while not stop.wait(rng.expovariate(1.0 / self.args.emit_every_s)):
            peer = rng.choice(self.peers)
            self.acknowledge(peer, "outcome" if rng.randrange(OUTCOME_EVERY) == 0 else "pulse")

    # ---- sampling ------------------------------------------------------------------------

    def sample_loop(self) -> None:
        round_no = 0
        while not self.sampling.wait(SAMPLE_EVERY_S):
            round_no += 1
            for peer in self.peers:
                self.sample(peer, scrape=round_no % SCRAPES_EVERY_SAMPLES == 0)

    def sample(self, peer: MeshPeer, *, scrape: bool) -> None:
        watch = self.watch[peer.peer_id]
        memory = peer.memory_kib()
        if memory is not None:
            watch.max_rss_kib = max(watch.max_rss_kib, *memory)
        watch.max_db_bytes = max(watch.max_db_bytes, peer.database_bytes())
        # Read beside the daemon's writes: a read that fails is taken again at the next sample.
        with contextlib.suppress(apsw.Error):
            watch.cycles.append((round(self.elapsed(), 1), peer.cycles_done()))
        if scrape:
            self.scrape(peer)

    def rejections(self) -> dict[str, dict[str, int]]:
        """Entries and objects each peer refused, by reason, over all its processes."""
        totals: dict[str, dict[str, int]] = {}
        with self.count_lock:
            for name, watch in self.watch.items():
                summed: Counter[str] = Counter()
                for counted in watch.rejected.values():
                    summed.update({reason: int(n) for reason, n in counted.items()})
                totals[name] = dict(sorted(summed.items()))
        return totals

    # ---- the schedule ----------------------------------------------------------------------

    def run_faults(self) -> None:
        fault_s = self.args.fault_s
        for at_s, kind, seed in plan(self.args.seed, fault_s, self.args.fault_every_s):
            begin = getattr(self, f"fault_{kind}")
            self.push(at_s, kind, _bound(begin, random.Random(seed)), ending=False)
        while self.elapsed() < fault_s:
            self.watch_exits()
            self.drain()
            time.sleep(SCHEDULER_TICK_S)
        self.fault_end_s = self.elapsed()
        self.stop_faults()

    def drain(self) -> None:
        """Take the steps that are due; one that cannot happen yet is tried again later."""
        while self.queue and self.queue[0].due_s <= self.elapsed():
            step = heapq.heappop(self.queue)
            if not self.attempt(step):
                self.push(self.elapsed() + POSTPONE_S, step.name, step.action,
                          ending=step.ending)  # fmt: skip

    def attempt(self, step: Event) -> bool:
        try:
            return step.action()
        except (ClientError, BotoCoreError, OSError, ServerStartError) as exc:
            if step.ending:
                self.event(f"{step.name}: {type(exc).__name__}: {exc}; trying again")
                return False
            self.failed[step.name] += 1
            self.event(f"{step.name} failed: {type(exc).__name__}: {exc}")
            return True

    def watch_exits(self) -> None:
        """A daemon that exited without being stopped: recorded, started again (as its
        unit would restart it) once the keyring is whole."""
        for peer in self.peers:
            process = peer.process
            if peer.peer_id in self.down or process is None or process.poll() is None:
                continue
            self.unexpected_exits.append({"peer": peer.peer_id, "at_s": round(self.elapsed(), 1),
                                          "code": process.returncode, "log": peer.log_tail(40)})  # fmt: skip
            self.event(f"{peer.peer_id} exited on its own with status {process.returncode}")
            self.down.add(peer.peer_id)
            self.push(self.elapsed(), f"restart {peer.peer_id}",
                      functools.partial(self.restart, peer), ending=True)  # fmt: skip

    def stop_faults(self) -> None:
        """End every fault under way; drop those not begun."""
        self.event("faults stop")
        self.queue = []
        if self.keyring is not None and self.keyring.state != "whole":
            self.keyring.restore()
        for attempt in range(RESTART_ATTEMPTS):
            if not self.s3_down:
                break
            try:
                self.s3_up()
            except ServerStartError:
                if attempt == RESTART_ATTEMPTS - 1:
                    raise
                time.sleep(POSTPONE_S)
        if self.race is not None:
            self.end_race(force=True)
        for name in self.clocks.skew_ms:
            self.clocks.skew_ms[name] = 0
        for peer in self.peers:
            if not peer.running():
                self.start(peer)
        self.event("keyring whole, SeaweedFS up, clocks right, every peer running")

    def restart(self, peer: MeshPeer) -> bool:
        if self.keyring is None or self.keyring.state != "whole":
            return False
        if peer.running():
            self.down.discard(peer.peer_id)
            return True
        self.start(peer)
        self.event(f"{peer.peer_id} started again")
        return True

    # ---- faults: processes, files, the server, clocks ------------------------------------

    def fault_kill_9(self, rng: random.Random) -> bool:
        candidates = self.running()
        if not candidates:
            return False
        peer = rng.choice(candidates)
        self.scrape(peer)
        self.down.add(peer.peer_id)
        peer.kill()
        down_s = self.draw_s(rng, KILL_DOWN_S)
        self.injected["kill_9"] += 1
        self.event(f"kill -9 {peer.peer_id}, down {down_s:.0f} s")
        self.push(self.elapsed() + down_s, f"restart {peer.peer_id}",
                  lambda: self.restart(peer), ending=True)  # fmt: skip
        return True

    def fault_keyring_churn(self, rng: random.Random) -> bool:
        keyring = self.keyring
        if keyring is None or keyring.state != "whole":
            return False
        if self.args.keyring_churn == "not-during-start" and not self.all_ready():
            return False
        missing_s, half_s = self.draw_s(rng, KEYRING_PHASE_S), self.draw_s(rng, KEYRING_PHASE_S)
        keyring.remove()
        self.injected["keyring_churn"] += 1
        self.event(f"keyring removed for {missing_s:.0f} s, then half-written for {half_s:.0f} s")

        def half() -> bool:
            keyring.half_written()
            self.push(self.elapsed() + half_s, "keyring restored", restore, ending=True)
            return True

        def restore() -> bool:
            keyring.restore()
            self.event("keyring whole again")
            return True

        self.push(self.elapsed() + missing_s, "keyring half-written", half, ending=True)
        return True

    def fault_s3_outage(self, rng: random.Random) -> bool:
        if self.s3_down or self.race is not None:
            return False  # the proxy of a junk race stops accepting once the server is gone
        outage_s = self.draw_s(rng, OUTAGE_S)
        self.server.stop()
        self.s3_down = True
        self.injected["s3_outage"] += 1
        self.event(f"SeaweedFS stopped for {outage_s:.0f} s")
        self.push(self.elapsed() + outage_s, "SeaweedFS started", self.s3_up, ending=True)
        return True

    def s3_up(self) -> bool:
        self.server = self.server.restart()
        self._s3 = None
        self.s3_down = False
        self.event("SeaweedFS started again")
        return True

    def fault_clock_skew(self, rng: random.Random) -> bool:
        calm = [name for name, skew in self.clocks.skew_ms.items() if skew == 0]
        if not calm:
            return False
        name = rng.choice(calm)
        skew_s = rng.uniform(self.args.max_skew_s / 4, self.args.max_skew_s) * rng.choice((-1, 1))
        for_s = self.draw_s(rng, SKEW_FOR_S)
        self.clocks.skew_ms[name] = int(skew_s * 1000)
        self.injected["clock_skew"] += 1
        self.event(f"{name}'s clock {skew_s:+.1f} s for {for_s:.0f} s")

        def right() -> bool:
            self.clocks.skew_ms[name] = 0
            self.event(f"{name}'s clock set right")
            return True

        self.push(self.elapsed() + for_s, f"{name}'s clock right", right, ending=True)
        return True

    def fault_junk_at_claimed_segment(self, rng: random.Random) -> bool:
        candidates = self.running()
        if self.s3_down or self.race is not None or not candidates:
            return False
        if self.keyring is None or self.keyring.state != "whole":
            return False
        peer = rng.choice(candidates)
        proxy = ClaimRacingProxy(
            self.server, self.server.backend(self.prefix), self.prefix, peer.peer_id
        )
        self.switch(peer, proxy.url)
        proxy.armed = rng.randint(1, 2)
        self.race = Race(peer, proxy, proxy.armed, self.elapsed() + RACE_LIMIT_S * self.scale)
        self.injected["junk_at_claimed_segment"] += 1
        self.event(f"{peer.peer_id} behind a proxy writing junk at its next "
                   f"{proxy.armed} claimed segment key(s)")  # fmt: skip
        self.acknowledge(peer, "pulse")  # something to publish
        self.push(self.elapsed() + RACE_CHECK_S, "junk race over",
                  lambda: self.end_race(force=False), ending=True)  # fmt: skip
        return True

    def end_race(self, *, force: bool) -> bool:
        race = self.race
        if race is None:
            return True
        if not force and len(race.proxy.junked) < race.armed and self.elapsed() < race.until_s:
            return False
        self.switch(race.peer, self.server.endpoint_url)
        race.proxy.close()
        self.objects["junk_at_claimed_segment"] += len(race.proxy.junked)
        self.event(f"{race.peer.peer_id} back on the bucket; junk written at "
                   f"{len(race.proxy.junked)} claimed segment key(s)")  # fmt: skip
        self.race = None
        return True

    def switch(self, peer: MeshPeer, endpoint_url: str) -> None:
        """Restart `peer` (SIGTERM, then start) on another S3 endpoint; a peer that is down,
        or cannot start yet (the keyring not whole), takes it when it starts again."""
        peer.settings["DREAMCYCLE_ZEITGEIST_S3_ENDPOINT_URL"] = endpoint_url
        if peer.peer_id in self.down or not peer.running():
            return
        self.stop(peer)
        if self.keyring is not None and self.keyring.state == "whole":
            self.start(peer)
            return
        self.down.add(peer.peer_id)
        self.push(self.elapsed(), f"restart {peer.peer_id}",
                  lambda: self.restart(peer), ending=True)  # fmt: skip

    # ---- faults: forged objects ------------------------------------------------------------

    def put(self, kind: str, key: str, data: bytes) -> bool:
        """Write `data` at `key` under the mesh's prefix unless something is there."""
        try:
            self.s3().put_object(Bucket=self.server.bucket, Key=f"{self.prefix}/{key}",
                                 Body=data, IfNoneMatch="*")  # fmt: skip
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "412"):
                return False
            raise
        self.objects[kind] += 1
        self.forged_keys.add(key)
        return True

    def listed(self, prefix: str, start_after: str = "") -> list[tuple[str, int]]:
        """(key under the mesh's prefix, size) of the objects under `prefix`."""
        found = []
        paginator = self.s3().get_paginator("list_objects_v2")
        pages = paginator.paginate(Bucket=self.server.bucket, Prefix=f"{self.prefix}/{prefix}",
                                   StartAfter=f"{self.prefix}/{start_after}")  # fmt: skip
        for page in pages:
            for item in page.get("Contents", []):
                found.append((item["Key"].split("/", 1)[1], int(item["Size"])))
        return found

    def forged_entries(self, rng: random.Random, origin: str, at_ms: int) -> list[Entry]:
        """A Reward pulse at a real chunk and a tombstone of another, as `origin`, unsigned:
        either would change every peer's memory if it were applied."""
        hlc = hlc_from_ms(at_ms)
        (seed_hash, embedding, index_version), (victim, _, _) = rng.sample(self.seeds, 2)
        pulse = SalientPulse(
            seed_embedding=embedding,
            kind=PulseKind.REWARD,
            strength=FORGED_STRENGTH,
            sigma=PULSE_SIGMA,
            max_hops=PULSE_MAX_HOPS,
            k=PULSE_K,
            decay_per_hop=PULSE_DECAY_PER_HOP,
            ts=hlc,
            origin_peer=origin,
            reason=f"forged {rng.getrandbits(32):08x}",
            ttl_s=PULSE_TTL_S,
            index_version=index_version,
            seed_hash=seed_hash,
        ).with_id()
        entries: list[Entry] = [
            PulseEntry(hlc=hlc, origin=origin, pulse=pulse),
            TombstoneEntry(hlc=hlc + 1, origin=origin, content_hash=victim, reason="forged",
                           collectable_after_ms=None, forget_pulse=None),
        ]  # fmt: skip
        self.forged_ids.update(entry.id for entry in entries)
        return entries

    def unsigned_segment(self, rng: random.Random, kind: str, origin: str, at_ms: int) -> bool:
        if self.s3_down:
            return False
        key = segment_key(hlc_from_ms(at_ms) + 2, origin, rng.randint(1, SEQ_MAX))
        self.put(kind, key, encode_segment(self.forged_entries(rng, origin, at_ms)))
        self.injected[kind] += 1
        self.event(f"{kind}: {key}")
        return True

    def fault_unsigned_segment_real_name(self, rng: random.Random) -> bool:
        origin = rng.choice(self.peers).peer_id
        return self.unsigned_segment(rng, "unsigned_segment_real_name", origin, _now_ms())

    def fault_unsigned_segment_made_up_name(self, rng: random.Random) -> bool:
        origin = rng.choice(MADE_UP_NAMES)
        return self.unsigned_segment(rng, "unsigned_segment_made_up_name", origin, _now_ms())

    def fault_future_dated_segment(self, rng: random.Random) -> bool:
        ahead_s = rng.uniform(*(FUTURE_BEYOND_S if rng.randrange(4) == 0 else FUTURE_WITHIN_S))
        origin = rng.choice([*(p.peer_id for p in self.peers), *MADE_UP_NAMES])
        at_ms = _now_ms() + int(ahead_s * 1000)
        return self.unsigned_segment(rng, "future_dated_segment", origin, at_ms)

    def any_name(self, rng: random.Random) -> str:
        return rng.choice([*(p.peer_id for p in self.peers), *MADE_UP_NAMES])

    def fault_junk_segment(self, rng: random.Random) -> bool:
        if self.s3_down:
            return False
        size = rng.randint(*JUNK_BYTES)
        variant = rng.randrange(3)
        if variant == 0:
            data = rng.randbytes(size)  # not gzip at all
        elif variant == 1:
            data = gzip.compress(rng.randbytes(size))  # gzip of bytes that are not UTF-8 text
        else:
            lines = (f"{{not json {rng.random()}\n" for _ in range(size // 16 + 1))
            data = gzip.compress("".join(lines).encode())
        key = segment_key(hlc_from_ms(_now_ms()), self.any_name(rng), rng.randint(1, SEQ_MAX))
        self.put("junk_segment", key, data)
        self.injected["junk_segment"] += 1
        self.event(f"junk_segment ({('raw', 'gzip', 'lines')[variant]}, {len(data)} B): {key}")
        return True

    def fault_oversized_object(self, rng: random.Random) -> bool:
        if self.s3_down:
            return False
        variant = rng.randrange(3)
        if variant == 0:
            data = rng.randbytes(MAX_SEGMENT_BYTES + MIB)  # past the compressed size
        elif variant == 1:
            data = gzip.compress(bytes(MAX_SEGMENT_EXPANDED_BYTES + MIB), 1)  # a gzip bomb
        else:
            data = gzip.compress(b"\n" * (MAX_SEGMENT_LINES + 1_000))  # past the line count
        key = segment_key(hlc_from_ms(_now_ms()), self.any_name(rng), rng.randint(1, SEQ_MAX))
        self.put("oversized_object", key, data)
        self.injected["oversized_object"] += 1
        what = ("compressed size", "decompressed size", "lines")[variant]
        self.event(f"oversized_object (past the {what}, {len(data)} B): {key}")
        return True

    def fault_garbage_claims(self, rng: random.Random) -> bool:
        if self.s3_down:
            return False
        peer = rng.choice(self.peers).peer_id
        claims = self.listed(f"{CLAIM_PREFIX}{peer}/")
        highest = max((parse_claim_key(key).seq for key, _ in claims), default=0)
        count = rng.randint(1, MAX_GARBAGE_CLAIMS)
        for number in range(highest + 1, highest + count + 1):
            if rng.randrange(2):
                body = segment_key(hlc_from_ms(_now_ms()), peer, number).encode()  # plausible
            else:
                body = rng.randbytes(rng.randint(1, 256))
            self.put("garbage_claims", claim_key(peer, number), body)
        self.injected["garbage_claims"] += 1
        self.event(f"garbage_claims: {count} for {peer} above its claim {highest}")
        return True

    def fault_unsigned_snapshot(self, rng: random.Random) -> bool:
        if self.s3_down:
            return False
        origin = self.any_name(rng)
        now = _now_ms()
        key = snapshot_key(hlc_from_ms(now), origin)
        self.put(
            "unsigned_snapshot", key, encode_segment(self.forged_entries(rng, origin, now - 1_000))
        )
        self.injected["unsigned_snapshot"] += 1
        self.event(f"unsigned_snapshot: {key}")
        return True

    def fault_copied_segment(self, rng: random.Random) -> bool:
        """A real peer's fresh segment, byte for byte, under a made-up name and under its own
        writer's name with another sequence number, both keyed just before it."""
        if self.s3_down:
            return False
        start = segment_listing_start(hlc_from_ms(_now_ms() - COPY_LOOKBACK_MS))
        names = {p.peer_id for p in self.peers}
        real = []
        for key, size in self.listed(SEGMENT_PREFIX, start):
            if is_rollup_key(key) or key in self.forged_keys or size >= MAX_SEGMENT_BYTES:
                continue
            try:
                parsed = parse_segment_key(key)
            except ValueError:
                continue
            if parsed.peer_id in names and parsed.hlc <= hlc_from_ms(_now_ms()):
                real.append((key, parsed))
        if not real:
            return False
        key, parsed = rng.choice(real)
        data = (
            self.s3()
            .get_object(Bucket=self.server.bucket, Key=f"{self.prefix}/{key}")["Body"]
            .read()
        )
        copies = [
            segment_key(parsed.hlc - 1, rng.choice(MADE_UP_NAMES), parsed.seq),
            segment_key(parsed.hlc - 1, parsed.peer_id, (parsed.seq + 0x1000_0000) % SEQ_MAX),
        ]
        for copy in copies:
            self.put("copied_segment", copy, data)
        self.injected["copied_segment"] += 1
        self.event(f"copied_segment: {key} as {', '.join(copies)}")
        return True

    # ---- the end ----------------------------------------------------------------------

    def settle(self) -> dict[str, Any]:
        """Wait (at most --settle-s) until every peer applied every pulse the mesh
        originated and every acknowledged one, and each acknowledged outcome became pulses."""
        began = self.elapsed()
        settled = Settled(lambda: self.peers, SETTLE_POLLS, also=self.acked_pulses)

        def done() -> bool:
            self.watch_exits()
            self.drain()
            return settled() and not self.unconverted()

        try:
            wait_for(done, "every peer to catch up", self.args.settle_s, lambda: self.peers)
            caught_up = True
        except BenchmarkError as exc:  # the checks below say what is missing
            print(str(exc).splitlines()[0], file=sys.stderr)
            caught_up = False
        self.event("every peer caught up" if caught_up else "catching up timed out")
        return {"caught_up": caught_up, "seconds": round(self.elapsed() - began, 1)}

    def acked_pulses(self) -> set[str]:
        return {a.entry_id for a in self.acks if a.kind == "pulse"}

    def outcome_records(self) -> dict[str, tuple[str, int]]:
        """Outcome id -> (status, pulses) on the peer that acknowledged it."""
        found: dict[str, tuple[str, int]] = {}
        for peer in self.peers:
            for outcome_id, status, pulses in peer.query(
                "SELECT outcome_id, status, pulses FROM outcomes WHERE observer_peer = ?",
                (peer.peer_id,),
            ):
                found[str(outcome_id)] = (str(status), int(pulses))
        return found

    def unconverted(self) -> list[str]:
        records = self.outcome_records()
        return [a.entry_id for a in self.acks if a.kind == "outcome"
                and records.get(a.entry_id, ("", 0))[0] != "converted"]  # fmt: skip

    def stop_all(self) -> None:
        for emitter in self.emitters.values():
            emitter.close()
        for peer in self.peers:
            if peer.running():
                self.stop(peer)


def _bound(begin: Callable[[random.Random], bool], rng: random.Random) -> Callable[[], bool]:
    return lambda: begin(rng)


def _now_ms() -> int:
    return SystemClock().now_ms()


# ---- the checks --------------------------------------------------------------------------


@dataclass
class Check:
    holds: bool
    detail: str
    #: What the check counted, for the JSON report.
    figures: dict[str, Any] = field(default_factory=dict)


def derived_pulses(peer: MeshPeer) -> dict[str, list[str]]:
    """Outcome id -> the pulses it became on `peer` (they carry the outcome's HLC)."""

    def queued(kind: str) -> list[tuple[str, int]]:
        rows = peer.query("SELECT entry_id, hlc FROM outbox WHERE kind = ?", (kind,))
        return [(str(entry_id), int(hlc)) for entry_id, hlc in rows]

    pulses_at: dict[int, list[str]] = {}
    for pulse_id, hlc in queued(PulseEntry.KIND):
        pulses_at.setdefault(hlc, []).append(pulse_id)
    return {outcome_id: pulses_at.get(hlc, []) for outcome_id, hlc in queued(OutcomeEntry.KIND)}


def check_acknowledged(chaos: Chaos, rows: dict[str, dict[str, Any]]) -> Check:
    peers = chaos.peers
    records = chaos.outcome_records()
    derived: dict[str, list[str]] = {}
    for peer in peers:
        derived |= derived_pulses(peer)
    outcomes = [a for a in chaos.acks if a.kind == "outcome"]
    from_outcomes = {p for a in outcomes for p in derived.get(a.entry_id, [])}
    expected = originated_pulses(peers) | chaos.acked_pulses() | from_outcomes
    applied = {p.peer_id: {str(r[0]) for r in p.query(
        "SELECT pulse_id FROM applied_pulses WHERE status = 'applied'")} for p in peers}  # fmt: skip
    outcome_entries = {p.peer_id: {str(e): str(s) for e, s in p.query(
        "SELECT entry_id, status FROM seen_entries WHERE kind = ?", (OutcomeEntry.KIND,))}
        for p in peers}  # fmt: skip
    lost: list[str] = []
    for ack in chaos.acks:
        if ack.kind == "pulse":
            wanted = [ack.entry_id]
        else:
            status, count = records.get(ack.entry_id, ("not recorded", 0))
            wanted = derived.get(ack.entry_id, [])
            if status != "converted" or count != len(wanted):
                lost.append(f"outcome {ack.entry_id[:12]} of {ack.peer}: {status}, "
                            f"{count} pulses recorded, {len(wanted)} queued")  # fmt: skip
                continue
            lost += [f"outcome {ack.entry_id[:12]} of {ack.peer} {got} on {name}"
                     for name, seen in outcome_entries.items()
                     if (got := seen.get(ack.entry_id, "not seen")) != "applied"]  # fmt: skip
        for name, ids in applied.items():
            lost += [f"{ack.kind} {p[:12]} of {ack.peer} not applied on {name}"
                     for p in wanted if p not in ids]  # fmt: skip
    bad = []
    for peer in peers:
        once = exactly_once(peer, expected)
        rows[peer.peer_id] |= {"expected": once.expected, "applied": once.applied,
                               "missing": once.missing, "unexpected": once.unexpected,
                               "twice": once.journaled_twice, "not_applied": once.not_applied}  # fmt: skip
        if once.missing or once.unexpected or once.journaled_twice:
            bad.append(f"{peer.peer_id}: {once}")
    acked = Counter(a.kind for a in chaos.acks)
    detail = (f"{acked['pulse']} pulses and {acked['outcome']} outcomes acknowledged "
              f"({len(from_outcomes)} pulses from the outcomes), {len(expected)} pulses "
              f"expected on every peer; {len(lost)} lost")  # fmt: skip
    if lost or bad:
        detail += ": " + "; ".join([*lost[:10], *bad])
    return Check(not lost and not bad, detail)


def check_salience(chaos: Chaos, rows: dict[str, dict[str, Any]], workdir: Path) -> Check:
    peers = chaos.peers
    reference = peers[0]
    problems = []
    for peer in peers:
        identical = bit_identical_replay(peer, workdir)
        rows[peer.peer_id]["replay_identical"] = identical
        if not identical:
            problems.append(f"{peer.peer_id}'s salience is not its own order replayed")
    agreed = agreement(peers)
    for peer in peers:
        rows[peer.peer_id]["differing"] = agreed.differing[peer.peer_id]
        if peer is reference:
            rows[peer.peer_id] |= {"same_order": True, "max_difference": 0.0}
            continue
        try:
            comparison = compare_replicas(reference, peer, workdir)
        except AssertionError as exc:
            problems.append(f"{peer.peer_id} against {reference.peer_id}: {exc}")
            continue
        rows[peer.peer_id] |= {"same_order": comparison.same_order,
                               "max_difference": comparison.max_difference}  # fmt: skip
        if comparison.explained_by_clamping:
            problems.append(f"{peer.peer_id}: {comparison}")
    detail = (f"{agreed.common} chunks on every peer, {agreed.identical} of them bit-identical "
              f"on all {len(peers)}; each peer's salience its own order replayed")  # fmt: skip
    if problems:
        detail += ": " + "; ".join(problems)
    figures = {"chunks_on_every_peer": agreed.common,
               "bit_identical_on_every_peer": agreed.identical}  # fmt: skip
    return Check(not problems, detail, figures)


def check_cycling(chaos: Chaos, rows: dict[str, dict[str, Any]]) -> Check:
    problems = []
    for peer in chaos.peers:
        series = chaos.watch[peer.peer_id].cycles
        during = [c for t, c in series if t <= chaos.fault_end_s]
        grew = len(during) > 1 and during[-1] > during[0]
        stall, last_t, last_c = 0.0, 0.0, -1
        for t, c in series:
            if c > last_c:
                last_c, last_t = c, t
            stall = max(stall, t - last_t)
        rows[peer.peer_id] |= {"cycles": (during[-1] - during[0]) if during else 0,
                               "stall_s": stall}  # fmt: skip
        if not grew:
            problems.append(f"{peer.peer_id} did not cycle while the faults ran")
        if stall > chaos.args.max_stall_s:
            problems.append(f"{peer.peer_id} went {stall:.0f} s without a cycle")
    for exit_ in chaos.unexpected_exits:
        problems.append(f"{exit_['peer']} exited on its own (status {exit_['code']})")
    detail = f"longest stretch without a cycle allowed: {chaos.args.max_stall_s:.0f} s"
    if problems:
        detail += ": " + "; ".join(problems)
    return Check(not problems, detail)


def check_bounded(chaos: Chaos, rows: dict[str, dict[str, Any]]) -> Check:
    problems = []
    for peer in chaos.peers:
        watch = chaos.watch[peer.peer_id]
        watch.max_db_bytes = max(watch.max_db_bytes, peer.database_bytes())
        rss_mib, db_mib = watch.max_rss_kib / 1024, watch.max_db_bytes / MIB
        rows[peer.peer_id] |= {"rss_mib": rss_mib, "db_mib": db_mib}
        if not 0 < rss_mib <= chaos.args.max_rss_mib:
            problems.append(f"{peer.peer_id}: peak RSS {rss_mib:.0f} MiB")
        if db_mib > chaos.args.max_db_mib:
            problems.append(f"{peer.peer_id}: database {db_mib:.1f} MiB")
    detail = (f"bounds: peak RSS <= {chaos.args.max_rss_mib:.0f} MiB, database with its WAL "
              f"<= {chaos.args.max_db_mib:.0f} MiB per peer")  # fmt: skip
    if problems:
        detail += ": " + "; ".join(problems)
    return Check(not problems, detail)


def check_forgeries(chaos: Chaos) -> Check:
    forged = sorted(chaos.forged_ids)
    problems = []
    for peer in chaos.peers:
        marks = ",".join("?" * len(forged))
        applied = peer.query(f"SELECT count(*) FROM seen_entries WHERE status = 'applied' "
                             f"AND entry_id IN ({marks})", forged)[0][0] if forged else 0  # fmt: skip
        pulses = peer.query(f"SELECT count(*) FROM applied_pulses WHERE status = 'applied' "
                            f"AND pulse_id IN ({marks})", forged)[0][0] if forged else 0  # fmt: skip
        tombstones = peer.query("SELECT count(*) FROM tombstones")[0][0]
        if applied or pulses or tombstones:
            problems.append(f"{peer.peer_id}: {applied} forged entries and {pulses} forged "
                            f"pulses applied, {tombstones} chunks tombstoned")  # fmt: skip
    detail = f"{len(forged)} forged entries written in {sum(chaos.objects.values())} objects"
    if problems:
        detail += ": " + "; ".join(problems)
    return Check(not problems, detail)


# ---- the run -----------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="chaos-"))
    try:
        return run_in(args, root)
    finally:
        if args.keep:
            print(f"data directories, logs and the bucket kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def run_in(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    server = start_seaweedfs(root / "weed")
    try:
        chaos = Chaos(args, root, server)
    except BaseException:
        server.stop()
        raise
    stop_emitting = threading.Event()
    try:
        chaos.setup()
        chaos.started = time.monotonic()
        sampler = threading.Thread(target=chaos.sample_loop, name="sampler", daemon=True)
        sampler.start()
        emitter = threading.Thread(target=chaos.emit_loop, args=(stop_emitting,),
                                   name="items", daemon=True)  # fmt: skip
        emitter.start()
        chaos.run_faults()
        stop_emitting.set()
        emitter.join()
        settled = chaos.settle()
        chaos.sampling.set()
        sampler.join()
        for peer in chaos.peers:
            chaos.sample(peer, scrape=False)
        chaos.stop_all()
        rows: dict[str, dict[str, Any]] = {p.peer_id: {"peer": p.peer_id} for p in chaos.peers}
        checks = {
            "salience": check_salience(chaos, rows, root),
            "acknowledged": check_acknowledged(chaos, rows),
            "cycling": check_cycling(chaos, rows),
            "bounded": check_bounded(chaos, rows),
            "forgeries_refused": check_forgeries(chaos),
        }
        for name, row in rows.items():
            watch = chaos.watch[name]
            row |= {"starts": watch.starts, "exit_codes": watch.stops}
        return {
            "prefix": chaos.prefix,
            "duration_s": round(chaos.elapsed(), 1),
            "faults_s": round(chaos.fault_end_s, 1),
            "settle": settled,
            "faults": {kind: chaos.injected[kind] for kind in FAULTS},
            "objects": dict(chaos.objects),
            "failed": dict(chaos.failed),
            "acknowledged": {
                "pulses": sum(1 for a in chaos.acks if a.kind == "pulse"),
                "outcomes": sum(1 for a in chaos.acks if a.kind == "outcome"),
                "not_acknowledged": chaos.emit_failures,
                "items": [asdict(a) for a in chaos.acks],
            },
            "checks": {name: asdict(check) for name, check in checks.items()},
            "peers": list(rows.values()),
            "rejected_by_reason": chaos.rejections(),
            "unexpected_exits": chaos.unexpected_exits,
            "events": chaos.events,
        }
    finally:
        stop_emitting.set()
        chaos.sampling.set()
        for peer in chaos.peers:
            if peer.running():
                peer.kill()
        chaos.clocks.stop()
        if chaos.race is not None:
            chaos.race.proxy.close()
        chaos.server.stop()


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The description as written, and each option's default."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.rsplit("\n\nOne file:", 1)[0],
        formatter_class=HelpFormatter,
        epilog="Exit status: 0 when every check holds, 1 when one does not, 2 for bad arguments.",
    )
    parser.add_argument("--minutes", type=float, default=20.0, help="how long faults run")
    parser.add_argument("--seconds", type=float, help="how long faults run, instead of --minutes")
    parser.add_argument("--seed", type=int, default=1, help="the schedule's seed")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the JSON report")
    parser.add_argument("--keep", action="store_true",
                        help="keep the data directories, logs and bucket (to look into a failure)")  # fmt: skip
    parser.add_argument("--interval", type=float, default=3.0, help="cycle.interval_s")
    parser.add_argument("--chunks", type=int, default=60, help="chunks every peer holds")
    parser.add_argument("--emit-every-s", type=float, default=1.0,
                        help="mean time between items queued (pulses and outcomes)")  # fmt: skip
    parser.add_argument("--fault-every-s", type=float, default=15.0,
                        help="mean time between faults after the first round")  # fmt: skip
    parser.add_argument("--keyring-churn", choices=("anytime", "not-during-start"),
                        default="anytime",
                        help="whether keyring churn may begin while a daemon is starting "
                        "(before it logs that it is ready)")  # fmt: skip
    parser.add_argument("--max-skew-s", type=float, default=45.0,
                        help="largest clock skew, below the zeitgeist's window")  # fmt: skip
    parser.add_argument("--compaction-s", type=float, default=120.0,
                        help="zeitgeist.compaction_interval_s")  # fmt: skip
    parser.add_argument("--settle-s", type=float, default=600.0,
                        help="longest wait for the peers to catch up after the faults")  # fmt: skip
    parser.add_argument("--max-rss-mib", type=float, default=1536.0,
                        help="bound on each daemon's peak resident memory")  # fmt: skip
    parser.add_argument("--max-db-mib", type=float, default=256.0,
                        help="bound on each database, with its write-ahead log")  # fmt: skip
    parser.add_argument("--max-stall-s", type=float, default=180.0,
                        help="bound on a stretch without a cycle on a peer")  # fmt: skip
    args = parser.parse_args(argv)
    args.fault_s = args.seconds if args.seconds is not None else args.minutes * 60
    positive = ("fault_s", "interval", "emit_every_s", "fault_every_s", "compaction_s",
                "settle_s", "max_rss_mib", "max_db_mib", "max_stall_s")  # fmt: skip
    for name in positive:
        value = getattr(args, name)
        if not (math.isfinite(value) and value > 0):
            option = "--seconds/--minutes" if name == "fault_s" else "--" + name.replace("_", "-")
            parser.error(f"{option} must be a finite number > 0, got {value}")
    if args.chunks < 2:
        parser.error(f"--chunks must be >= 2, got {args.chunks}")
    if not 0 <= args.max_skew_s < ZEITGEIST_WINDOW_S:
        parser.error(f"--max-skew-s must be >= 0 and below the zeitgeist's window "
                     f"({ZEITGEIST_WINDOW_S:g} s), which must exceed clock skew; got "
                     f"{args.max_skew_s}")  # fmt: skip
    return args


def report(result: dict[str, Any], machine: dict[str, Any], args: argparse.Namespace) -> None:
    print(machine_summary(machine))
    print(f"seed {args.seed}, {result['faults_s']:.0f} s of faults, cycle interval "
          f"{args.interval:g} s, caught up in {result['settle']['seconds']:.0f} s "
          f"({'yes' if result['settle']['caught_up'] else 'no'}), {result['duration_s']:.0f} s "
          f"in all")  # fmt: skip
    print_table(result["peers"], [
        Column("peer"), Column("starts"), Column("cycles", "cycles in faults"),
        Column("stall_s", "longest stall s"), Column("rss_mib", "peak RSS MiB"),
        Column("db_mib", "db MiB", ".1f"), Column("expected", "pulses expected"),
        Column("applied"), Column("missing"), Column("unexpected"), Column("twice"),
        Column("replay_identical", "replay identical"), Column("same_order", "same order as p0"),
        Column("differing", "chunks != p0"), Column("max_difference", "max diff", ".1e"),
    ])  # fmt: skip
    print()
    faults = [{"fault": kind, "times": result["faults"][kind],
               "objects": result["objects"].get(kind)} for kind in FAULTS]  # fmt: skip
    print_table(faults, [Column("fault"), Column("times"), Column("objects", "objects written")])
    print()
    checks = [{"check": name, "holds": c["holds"], "detail": c["detail"]}
              for name, c in result["checks"].items()]  # fmt: skip
    print_table(checks, [Column("check"), Column("holds"), Column("detail")])


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    machine = describe_machine(("boto3", "hnswlib", "apsw", "onnxruntime"))
    try:
        result = run(args)
    except Exception as exc:
        traceback.print_exc()
        write_json(args.out, {"machine": machine, "seed": args.seed,
                              "options": vars(args) | {"out": str(args.out)},
                              "error": f"{type(exc).__name__}: {exc}"})  # fmt: skip
        print(f"error: the run could not finish: {exc}", file=sys.stderr)
        return 1
    report(result, machine, args)
    write_json(args.out, {"machine": machine, "seed": args.seed,
                          "options": vars(args) | {"out": str(args.out)}, **result})  # fmt: skip
    holds = all(c["holds"] for c in result["checks"].values())
    print(f"\n{'every check holds' if holds else 'a check failed'}; report in {args.out}")
    return 0 if holds else 1


if __name__ == "__main__":
    sys.exit(main())
