"""Four dreamcycle daemons (separate processes) sharing one zeitgeist on a real S3 server.

p1 and p2 hold the same chunks, p3 a different slice of the documentation. Pulses
are emitted on every peer with `pulse-emit` while the daemons run, so each peer
receives them in its own order. The test checks that every pulse reaches every
peer within the delivery bound, exactly once, and that the two replicas holding
the same chunks agree bit for bit wherever the order of application cannot
matter. Then the log is compacted into a snapshot and a fourth peer joins from
it. Downscale and sweep are off, so salience changes only through pulses.

Why replicas can differ at all: each pulse adds its deltas to the chunks it
reaches, then clamps into [pin_floor, 1.0]. The chunks reached are the same on
every peer with the same index (BFS never depends on salience, and nothing is
tombstoned here). Without clamping the updates commute, in floating point too: each
moves salience by whole steps of 2 ** -40, whose sums are exact. With clamping the
order matters: a Reward on a chunk at 1.0 is lost, while after a Decay it is not. Each
peer's order is replayed in-process over the same index and compared with what each
one stored; only chunks a clamp touched may differ.

One file: it is one test of one mesh of daemon processes, and the replay and compaction
helpers above it serve only that test.
"""

from __future__ import annotations

import concurrent.futures
import functools
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import pytest

from dreamcycle.daemon.clock import SystemClock
from dreamcycle.daemon.signing_keys import read_keyring
from dreamcycle.store.timefmt import ms_from_iso
from dreamcycle.zeitgeist.hlc import HybridLogicalClock
from dreamcycle.zeitgeist.log import CompactionOutcome, CompactionReport, Zeitgeist
from dreamcycle.zeitgeist.object_keys import SEGMENT_PREFIX, is_rollup_key, parse_segment_key
from dreamcycle.zeitgeist.signing import Signer, Verifier, generate_key
from scripts.local_servers import RunningS3
from scripts.mesh_check import compare_replicas, journal_pulse_order
from tests.daemon_helpers import (
    Daemon,
    Peer,
    documentation_chunks,
    emitted_id,
    trust_key,
    wait_until,
    write_jsonl,
)

pytestmark = pytest.mark.slow

CYCLE_INTERVAL_S: Final = 1.0
#: Short, so that compaction's horizon (min cursor - window) moves within the test.
WINDOW_S: Final = 3.0
#: The daemons here run on real time; the test measures and compacts by it too.
wall_clock_ms = SystemClock().now_ms
#: Slack for the operating system's scheduling: the bound itself is measured, not guessed.
SCHEDULING_SLACK_S: Final = 0.5
WATCH_INTERVAL_S: Final = 0.05
SHARED_TOPICS: Final = ("for", "while", "try", "with", "function", "class", "raise", "import")
OTHER_TOPICS: Final = ("string-methods", "formatstrings")
CHUNKS_PER_PEER: Final = 60
#: Chunks of this topic are pinned, so Decay pulses meet a floor above 0.
PINNED_TOPIC: Final = "try"
PIN_FLOOR: Final = 0.95


@dataclass(frozen=True)
class PulsePlan:
    peer: str
    kind: str
    strength: float
    text: str


#: Round one is emitted concurrently on all three peers; round two after a pause longer
#: than the window, so compaction can fold everything of round one.
ROUND_ONE: Final = (
    PulsePlan("p1", "decay", 0.4, "an exception raised in the try clause is handled by except"),
    PulsePlan("p1", "reward", 0.3, "the for statement iterates over the items of a sequence"),
    PulsePlan("p1", "decay", 0.2, "a with statement calls the context manager's __exit__"),
    PulsePlan("p2", "reward", 0.5, "the finally clause runs on the way out of a try statement"),
    PulsePlan("p2", "decay", 0.3, "the loop's else clause runs when the loop was not broken"),
    PulsePlan("p2", "decay", 0.5, "default parameter values are evaluated once per definition"),
    PulsePlan("p3", "decay", 0.4, "str.format replaces fields in braces with arguments"),
    PulsePlan("p3", "reward", 0.4, "raise re-raises the exception that is being handled"),
    PulsePlan("p3", "decay", 0.3, "import finds a module and binds it in the local namespace"),
)
ROUND_TWO: Final = (
    PulsePlan("p1", "reward", 0.2, "a class definition creates a class object"),
    PulsePlan("p2", "decay", 0.3, "the while statement repeats while an expression is true"),
    PulsePlan("p3", "decay", 0.2, "exception chaining with raise from sets __cause__"),
)


# ---- the mesh ---------------------------------------------------------------------------


def mesh_settings(server: RunningS3, prefix: str) -> dict[str, str]:
    """Every peer on one bucket and prefix; salience changes only through pulses."""
    return {
        "DREAMCYCLE_ZEITGEIST_BACKEND": "s3",
        "DREAMCYCLE_ZEITGEIST_S3_BUCKET": server.bucket,
        "DREAMCYCLE_ZEITGEIST_S3_PREFIX": prefix,
        "DREAMCYCLE_ZEITGEIST_S3_ENDPOINT_URL": server.endpoint_url,
        "DREAMCYCLE_ZEITGEIST_S3_REGION": server.region,
        "DREAMCYCLE_ZEITGEIST_WINDOW_S": str(WINDOW_S),
        "DREAMCYCLE_DOWNSCALE_ENABLED": "false",
        "DREAMCYCLE_SWEEP_ENABLED": "false",
        "AWS_ACCESS_KEY_ID": server.access_key_id,
        "AWS_SECRET_ACCESS_KEY": server.secret_access_key,
    }


def chunk_file(path: Path, topics: Sequence[str]) -> Path:
    rows: list[dict[str, object]] = []
    for chunk in documentation_chunks(topics, limit=CHUNKS_PER_PEER):
        pinned = chunk["title"] == PINNED_TOPIC
        rows.append({**chunk, "pin_floor": PIN_FLOOR} if pinned else dict(chunk))
    return write_jsonl(path, rows)


def make_peer(root: Path, name: str, settings: Mapping[str, str]) -> Peer:
    return Peer(
        data_dir=root / name,
        peer_id=name,
        zeitgeist_dir=root / "unused-zeitgeist-dir",
        settings=dict(settings),
    )


def ingest_all(pairs: Sequence[tuple[Peer, Path]]) -> None:
    """`dreamcycle ingest` for every (peer, file) at once; no daemon runs yet."""
    with concurrent.futures.ThreadPoolExecutor(len(pairs)) as pool:
        for result in pool.map(lambda pair: pair[0].dreamcycle("ingest", str(pair[1])), pairs):
            assert f"new {CHUNKS_PER_PEER}" in result.stdout, result.stdout


def all_admitted(peer: Peer) -> bool:
    if peer.cycles_done() == 0:
        return False
    count = peer.scalar(
        "SELECT count(*) FROM observations WHERE admitted_seq IS NOT NULL AND type != 'efficacy'"
    )
    return bool(count == CHUNKS_PER_PEER)


def applied_ids(peer: Peer) -> set[str]:
    if not peer.database_path.exists():
        return set()
    rows = peer.query("SELECT pulse_id FROM applied_pulses WHERE status = 'applied'")
    return {str(row[0]) for row in rows}


def wait_started(peers: Sequence[Peer], daemons: Sequence[Daemon]) -> None:
    def context() -> str:
        return "\n".join(d.log_tail() for d in daemons)

    for peer in peers:
        wait_until(
            functools.partial(all_admitted, peer),
            what=f"{peer.peer_id} to admit its {CHUNKS_PER_PEER} chunks",
            context=context,
        )


@dataclass
class ApplicationWatch:
    """Records, per peer and pulse, the wall time at which 'applied' first became visible."""

    peers: Sequence[Peer]
    first_seen_ms: dict[tuple[str, str], int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> ApplicationWatch:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._stop.wait(WATCH_INTERVAL_S)

    def poll_once(self) -> None:
        for peer in self.peers:
            now = wall_clock_ms()
            for pulse_id in applied_ids(peer):
                self.first_seen_ms.setdefault((peer.peer_id, pulse_id), now)


def emit_round(peers: Mapping[str, Peer], plans: Sequence[PulsePlan], nonce: str) -> list[str]:
    """Every peer emits its share of `plans` at the same time as the others; ids in plan order."""

    def emit_for(peer_name: str) -> list[tuple[int, str]]:
        peer = peers[peer_name]
        done = []
        for number, plan in enumerate(plans):
            if plan.peer != peer_name:
                continue
            result = peer.pulse_emit(
                "pulse",
                "--text", plan.text,
                "--kind", plan.kind,
                "--strength", str(plan.strength),
                "--reason", "mesh/test",
                "--nonce", f"{nonce}-{number}",
            )  # fmt: skip
            done.append((number, emitted_id(result)))
        return done

    names = sorted({plan.peer for plan in plans})
    with concurrent.futures.ThreadPoolExecutor(len(names)) as pool:
        numbered = [pair for pairs in pool.map(emit_for, names) for pair in pairs]
    return [pulse_id for _, pulse_id in sorted(numbered)]


def wait_applied_everywhere(
    peers: Sequence[Peer], pulse_ids: Sequence[str], daemons: Sequence[Daemon]
) -> None:
    wanted = set(pulse_ids)
    wait_until(
        lambda: all(wanted <= applied_ids(peer) for peer in peers),
        what=f"{len(wanted)} pulses to be applied on {[p.peer_id for p in peers]}",
        context=lambda: "\n".join(
            [f"{p.peer_id} lacks {sorted(wanted - applied_ids(p))}" for p in peers]
            + [d.log_tail() for d in daemons]
        ),
    )


def emitted_at_ms(peers: Mapping[str, Peer], pulse_ids: Sequence[str]) -> dict[str, int]:
    """When each pulse was committed to its origin's outbox (what the daemon picks up)."""
    found: dict[str, int] = {}
    for peer in peers.values():
        for entry_id, created in peer.query("SELECT entry_id, created_at FROM outbox"):
            if entry_id in pulse_ids:
                found[str(entry_id)] = ms_from_iso(str(created))
    assert set(found) == set(pulse_ids), "every emitted pulse is in its origin's outbox"
    return found


def longest_cycle_s(peers: Sequence[Peer]) -> float:
    longest = 0.0
    for peer in peers:
        for started, finished in peer.query(
            "SELECT started_at, finished_at FROM cycles WHERE finished_at IS NOT NULL"
        ):
            longest = max(longest, (ms_from_iso(finished) - ms_from_iso(started)) / 1000)
    return longest


def check_exactly_once(peer: Peer, emitted: set[str]) -> None:
    """Applied equals emitted: nothing lost, nothing rejected, nothing applied twice."""
    statuses = dict(peer.query("SELECT pulse_id, status FROM applied_pulses"))
    assert set(statuses) == emitted, f"{peer.peer_id} recorded other pulses than were emitted"
    assert set(statuses.values()) == {"applied"}, f"{peer.peer_id}: {statuses}"
    order = journal_pulse_order(peer)
    assert sorted(order) == sorted(emitted), f"{peer.peer_id} journals each pulse exactly once"


# ---- compaction ---------------------------------------------------------------------------


def compact_past(
    server: RunningS3, prefix: str, pulse_ids: set[str], keyring_path: Path
) -> CompactionReport:
    """Compact until a snapshot holds `pulse_ids` (heartbeats must first pass their segments).

    The compactor seals its snapshot with a key the mesh's keyring trusts."""
    signer = Signer("compactor", generate_key())
    trust_key(keyring_path, signer)
    zeitgeist = Zeitgeist(
        server.backend(prefix),
        "compactor",
        HybridLogicalClock(wall_clock_ms),
        wall_ms=wall_clock_ms,
        window_ms=int(WINDOW_S * 1000),
        signer=signer,
        verifier=Verifier(read_keyring(keyring_path), strict=True),
    )
    reports: list[CompactionReport] = []

    def folded() -> CompactionReport | None:
        report = zeitgeist.compact(wall_clock_ms())
        if report is not None:
            reports.append(report)
        snapshot = zeitgeist.latest_snapshot()
        covered = snapshot is not None and pulse_ids <= {e.id for e in snapshot.entries}
        if report is not None and report.outcome is CompactionOutcome.COMPACTED and covered:
            return report
        return None

    return wait_until(folded, what="a compaction folding round one", context=lambda: f"{reports}")


def segment_keys(server: RunningS3, prefix: str) -> list[str]:
    """The segments in the bucket (roll-ups, listed beside them, left out)."""
    return [
        k for k in server.backend(prefix).list_after(SEGMENT_PREFIX, "") if not is_rollup_key(k)
    ]


# ---- the test ------------------------------------------------------------------------------


@pytest.fixture
def daemons() -> Iterator[list[Daemon]]:
    running: list[Daemon] = []
    yield running
    for daemon in running:
        daemon.kill()


def test_four_peers_share_one_zeitgeist_on_s3(
    s3_server: RunningS3, tmp_path: Path, daemons: list[Daemon]
) -> None:
    prefix = f"mesh-{uuid.uuid4().hex[:12]}"
    settings = mesh_settings(s3_server, prefix)
    shared = chunk_file(tmp_path / "shared.jsonl", SHARED_TOPICS)
    other = chunk_file(tmp_path / "other.jsonl", OTHER_TOPICS)
    peers = {name: make_peer(tmp_path, name, settings) for name in ("p1", "p2", "p3")}
    # p4 holds p1's chunks too; it is stored now and its daemon started after compaction.
    p4 = make_peer(tmp_path, "p4", settings)
    ingest_all([(peers["p1"], shared), (peers["p2"], shared), (peers["p3"], other), (p4, shared)])
    for peer in peers.values():
        daemons.append(peer.start("--interval", str(CYCLE_INTERVAL_S)))
    wait_started(list(peers.values()), daemons)

    with ApplicationWatch(list(peers.values())) as watch:
        round_one = emit_round(peers, ROUND_ONE, "r1")
        wait_applied_everywhere(list(peers.values()), round_one, daemons)
        # Past the window, so round two's segments lift every cursor beyond round one's.
        time.sleep(WINDOW_S + CYCLE_INTERVAL_S)
        round_two = emit_round(peers, ROUND_TWO, "r2")
        wait_applied_everywhere(list(peers.values()), round_two, daemons)
        watch.poll_once()
    emitted = round_one + round_two
    assert len(set(emitted)) == len(ROUND_ONE) + len(ROUND_TWO), "every --nonce makes a new pulse"

    # Delivery. The origin's next cycle starts within one interval of the emit and
    # publishes when it ends; every other peer's next cycle starts within one interval
    # of that and applies when it ends: two intervals plus two cycle durations at worst.
    emitted_ms = emitted_at_ms(peers, emitted)
    cycle_s = longest_cycle_s(list(peers.values()))
    # Emitted just after its peer's cycle took the outbox: that cycle ends, the next starts
    # an interval later and publishes as it ends; a reader's cycle under way then misses
    # it, and the next one, an interval later, applies it by its end: four cycles at most.
    bound_ms = (2 * CYCLE_INTERVAL_S + 4 * cycle_s + SCHEDULING_SLACK_S) * 1000
    latencies = {
        (peer, pulse_id): seen - emitted_ms[pulse_id]
        for (peer, pulse_id), seen in watch.first_seen_ms.items()
    }
    assert len(latencies) == len(peers) * len(emitted)
    print(
        f"delivery: longest cycle {cycle_s:.3f} s, bound {bound_ms / 1000:.3f} s, "
        f"slowest {max(latencies.values()) / 1000:.3f} s"
    )
    late = {key: ms for key, ms in latencies.items() if ms > bound_ms}
    assert not late, f"pulses applied later than {bound_ms:.0f} ms after emission: {late}"

    for peer in peers.values():
        check_exactly_once(peer, set(emitted))
        # Pulses from other peers propagate over this peer's own k-NN graph, p3's too,
        # though it holds none of the chunks the others hold.
        changed_by_others = peer.scalar(
            "SELECT sum(changed) FROM applied_pulses WHERE origin_peer != ?", (peer.peer_id,)
        )
        assert changed_by_others > 0, f"no remote pulse changed a chunk of {peer.peer_id}"
    compare_replicas(peers["p1"], peers["p2"], tmp_path)

    # Compaction folds round one (and the chunk announcements) into a snapshot.
    before = set(segment_keys(s3_server, prefix))
    report = compact_past(s3_server, prefix, set(round_one), p4.keyring_path)
    after = set(segment_keys(s3_server, prefix))
    assert report.segments_deleted > 0 and len(after) < len(before)
    horizon = report.horizon_hlc
    assert horizon is not None
    assert all(parse_segment_key(key).hlc >= horizon for key in after)

    # p4 joins after the compaction and bootstraps from the snapshot.
    daemons.append(p4.start("--interval", str(CYCLE_INTERVAL_S)))
    wait_applied_everywhere([p4], emitted, daemons)
    # The snapshot is recorded as applied in the transaction after its pulses.
    bootstrapped = wait_until(
        lambda: p4.query("SELECT key FROM applied_segments WHERE key LIKE 'snap/%'"),
        what="p4 recording the snapshot it bootstrapped from",
        context=daemons[-1].log_tail,
    )
    assert [str(row[0]) for row in bootstrapped] == [report.snapshot_key]
    check_exactly_once(p4, set(emitted))
    compare_replicas(peers["p1"], p4, tmp_path)

    for daemon in daemons:
        assert daemon.terminate() == 0, daemon.log_tail()
