"""Bad log entries, crashes between commits, and a peer's own segments, driven in-process.

Each test runs the daemon's real phases on a real database, index, embedding model
and directory zeitgeist; another peer's segments are written with the real log layer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from pydoc_data.topics import topics

import pytest

from dreamcycle.daemon.clock import SystemClock
from dreamcycle.daemon.config import load_config
from dreamcycle.daemon.cycle import (
    CURSOR_META_KEY,
    LAST_SWEEP_META_KEY,
    CycleState,
    percentile_sweep,
    run_cycle_blocking,
)
from dreamcycle.daemon.defaults import SIGNING_KEYRING_FILE
from dreamcycle.daemon.intake.ingest import ingest
from dreamcycle.daemon.recall.retrieve import recall
from dreamcycle.daemon.runtime import Peer, Runtime
from dreamcycle.pulses.outcome import decision_hash
from dreamcycle.pulses.pulse import PulseKind, SalientPulse
from dreamcycle.store import tiers as store_tiers
from dreamcycle.store.database import NewObservation, initial_salience
from dreamcycle.zeitgeist.directory import DirectoryBackend
from dreamcycle.zeitgeist.entries import (
    Entry,
    OutcomeEntry,
    PulseEntry,
    ReconsolidateEntry,
    TombstoneEntry,
    encode_segment,
)
from dreamcycle.zeitgeist.hlc import HybridLogicalClock, hlc_from_ms
from dreamcycle.zeitgeist.log import PreparedSegment, PublishResult
from dreamcycle.zeitgeist.object_keys import segment_key
from dreamcycle.zeitgeist.signing import Signer, generate_key
from tests.daemon_helpers import trust_key

CHUNKS = 40
CENTURY_MS = 100 * 365 * 86_400_000
#: The peers here run on real time (the default clock); other writers stamp by it too.
wall_clock_ms = SystemClock().now_ms


class Killed(BaseException):
    """Stands for kill -9: nothing after it runs, no handler catches it."""


def paragraphs(n: int) -> list[str]:
    found: list[str] = []
    for name in sorted(topics):
        for paragraph in topics[name].split("\n\n"):
            text = paragraph.strip()
            if len(text) > 80 and text not in found:
                found.append(text)
                if len(found) == n:
                    return found
    raise AssertionError("not enough paragraphs")


def open_peer(tmp_path: Path, **settings: object) -> Peer:
    overrides = {
        "peer.id": "a",
        "peer.data_dir": str(tmp_path / "a"),
        "zeitgeist.dir": str(tmp_path / "zeitgeist"),
        "metrics.listen": "",
        "downscale.enabled": False,
        **settings,
    }
    return Runtime.open(load_config(environ={}, overrides=overrides)).open_peer()


@contextlib.contextmanager
def ingested_peer(tmp_path: Path, chunks: int = CHUNKS, **settings: object) -> Iterator[Peer]:
    """A peer holding `chunks` paragraphs of real text, after one cycle; closed after."""
    peer = open_peer(tmp_path, **settings)
    try:
        ingest(peer.runtime, [[NewObservation(content=text) for text in paragraphs(chunks)]])
        run_cycle_blocking(peer)
        yield peer
    finally:
        peer.close()
        peer.runtime.close()


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[Peer]:
    with ingested_peer(tmp_path) as opened:
        yield opened


def publish_as(
    tmp_path: Path,
    peer_id: str,
    entries: list[Entry],
    seq: int = 1,
    roles: tuple[str, ...] = ("peer",),
) -> str:
    """Write a segment as a careless (or hostile) peer might: keyed at the present, whatever
    its entries say, but signed with a key peer a trusts (for `roles`)."""
    signer = Signer(peer_id, generate_key())
    trust_key(tmp_path / "a" / SIGNING_KEYRING_FILE, signer, roles)
    return publish_signed(tmp_path, signer, entries, seq)


def publish_signed(tmp_path: Path, signer: Signer, entries: list[Entry], seq: int = 1) -> str:
    """Write a segment of `entries` signed and sealed by `signer` (trusted or not), keyed at
    the present; its key."""
    key = segment_key(HybridLogicalClock(wall_clock_ms).now(), signer.peer_id, seq)
    signed = [signer.sign_entry(entry) for entry in entries]
    data = encode_segment(signed, seal=lambda digest: signer.seal(key, digest))
    DirectoryBackend(tmp_path / "zeitgeist").create(key, data)
    return key


def entry_status(peer: Peer, entry: Entry) -> tuple[str, str | None]:
    row = peer.db.conn.execute(
        "SELECT status, reason FROM seen_entries WHERE entry_id = ?", (entry.id,)
    ).fetchone()
    assert row is not None, f"{entry.KIND} entry {entry.id} was never recorded"
    return str(row[0]), row[1]


def test_bad_entries_are_rejected_alone_and_the_rest_of_the_segment_applies(
    peer: Peer, tmp_path: Path
) -> None:
    chunk = peer.db.observation(1)
    assert chunk is not None
    now = HybridLogicalClock(wall_clock_ms).now()
    mine = recall(peer.runtime, "how are exceptions raised")
    assert mine.decision_hash is not None
    seed = peer.embedder.embed_one("exceptions")
    tiny_sigma = SalientPulse(
        seed_embedding=seed, kind=PulseKind.DECAY, strength=0.5, sigma=1e-200, max_hops=0,
        k=1, decay_per_hop=0.1, ts=now, origin_peer="b", reason="bad",
        ttl_s=3600.0, index_version=peer.embedder.index_version,
    ).with_id()  # fmt: skip
    bad: list[Entry] = [
        # importance outside 0..10 breaks a CHECK constraint when applied
        ReconsolidateEntry(hlc=now, origin="b", content_hash=chunk.content_hash,
                           changes={"importance": 42}),
        # a reward outside [-1, 1] for a decision this peer made
        OutcomeEntry(hlc=now + 1, origin="b", decision_hash=mine.decision_hash, reward=2.0,
                     observer_peer="b", reason="bad"),
        # a collectable_after no calendar can hold
        TombstoneEntry(hlc=now + 2, origin="b", content_hash="f" * 64, reason="bad",
                       collectable_after_ms=10**15, forget_pulse=None),
        PulseEntry(hlc=now + 3, origin="b", pulse=tiny_sigma),
        # stamped centuries ahead: observing it would drag this peer's clock along
        ReconsolidateEntry(hlc=hlc_from_ms(wall_clock_ms() + CENTURY_MS), origin="b",
                           content_hash=chunk.content_hash,
                           changes={"title": "from the future"}),
    ]  # fmt: skip
    good = ReconsolidateEntry(
        hlc=now + 5, origin="b", content_hash=chunk.content_hash, changes={"title": "renamed"}
    )
    key = publish_as(tmp_path, "b", [*bad, good])

    run_cycle_blocking(peer)

    assert peer.db.segment_applied(key)
    for entry in bad:
        status, reason = entry_status(peer, entry)
        assert status == "rejected", (entry.KIND, status)
        assert reason
    assert entry_status(peer, good) == ("applied", None)
    assert peer.db.observation(1).title == "renamed"  # type: ignore[union-attr]
    assert peer.clock.last < hlc_from_ms(wall_clock_ms() + 3_600_000)
    # The salience of the chunk the bad reconsolidate named did not move from where it started.
    assert peer.salience.salience(1) == initial_salience(5)


def test_a_cycle_after_rejections_is_clean(peer: Peer, tmp_path: Path) -> None:
    chunk = peer.db.observation(2)
    assert chunk is not None
    now = HybridLogicalClock(wall_clock_ms).now()
    publish_as(tmp_path, "b", [ReconsolidateEntry(hlc=now, origin="b",
               content_hash=chunk.content_hash, changes={"importance": -1})])  # fmt: skip
    first = run_cycle_blocking(peer)
    second = run_cycle_blocking(peer)
    counts = {k: v for k, v in first.stats["reconsolidate"].items() if k != "seconds"}
    assert counts == {"reconsolidate:rejected": 1}
    assert second.stats["scan"]["fetched"] == 0


def test_own_segments_move_the_cursor(peer: Peer) -> None:
    for query in ("exceptions", "modules", "classes"):
        recall(peer.runtime, query)
        run_cycle_blocking(peer)
    cursor = int(peer.db.get_meta(CURSOR_META_KEY) or "0")
    assert cursor > 0
    # The next poll starts a window before the cursor, not at the beginning of the log.
    listed = run_cycle_blocking(peer).stats["scan"]["listed"]
    total = len(list((Path(peer.config.zeitgeist_dir) / "seg").iterdir()))
    assert total >= 4
    assert listed <= total


def test_a_crash_inside_a_sweep_never_sweeps_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No grace period: the chunks were just ingested.
    settings = {"sweep.min_population": 10, "sweep.interval_s": 3600.0, "sweep.grace_s": 0.0}
    peer = open_peer(tmp_path, **settings)
    ingest(peer.runtime, [[NewObservation(content=text) for text in paragraphs(CHUNKS)]])
    run_cycle_blocking(peer)  # the first cycle starts the sweep interval
    with peer.db.transaction():
        peer.db.write_salience({label: 0.1 + 0.02 * label for label in range(1, CHUNKS + 1)})
        peer.db.set_meta(LAST_SWEEP_META_KEY, "0")  # the interval has passed
    peer.salience.reload()

    def crash(*_args: object, **_kwargs: object) -> list[int]:
        raise Killed

    # The sweep moves chunks to the cold tier: die as it moves them.
    with monkeypatch.context() as patch:
        patch.setattr(store_tiers, "move_each_to_cold", crash)
        with pytest.raises(Killed):
            percentile_sweep.run(peer, CycleState(now_ms=wall_clock_ms()))
    peer.runtime.close()

    restarted = open_peer(tmp_path, **settings)
    assert percentile_sweep.run(restarted, CycleState(now_ms=wall_clock_ms())) == {
        "revived": 0,
        "skipped": "interval",
    }
    assert restarted.db.counts()["cold"] == 0
    assert restarted.db.counts()["tombstones"] == 0
    restarted.runtime.close()


def test_a_late_segment_whose_copy_was_not_written_is_copied_after_a_restart(
    peer: Peer, tmp_path: Path
) -> None:
    recall(peer.runtime, "exceptions")  # queues an attribution entry to publish
    real_publish = peer.zeitgeist.publish
    calls: list[str] = []

    def late_then_crash(prepared: PreparedSegment) -> PublishResult:
        calls.append(prepared.key)
        if len(calls) == 1:
            real_publish(prepared)
            return PublishResult(key=prepared.key, late=True)
        raise Killed

    peer.zeitgeist.publish = late_then_crash  # type: ignore[method-assign]
    with pytest.raises(Killed):
        run_cycle_blocking(peer)
    statuses = {
        str(key): str(status)
        for key, status in peer.db.conn.execute("SELECT key, status FROM segments_out")
    }
    assert statuses[calls[0]] == "published"
    assert statuses[calls[1]] == "prepared"  # the copy survives the crash
    peer.runtime.close()

    restarted = open_peer(tmp_path)
    run_cycle_blocking(restarted)
    assert (tmp_path / "zeitgeist" / calls[1]).exists()
    restarted.runtime.close()


def test_decision_hash_of_a_recall_is_reproducible(peer: Peer) -> None:
    result = recall(peer.runtime, "exceptions")
    row = peer.db.attribution(result.decision_hash or "")
    assert row is not None
    assert (
        decision_hash(row.peer, row.hlc, row.chunk_hashes, row.decision_text)
        == result.decision_hash
    )
