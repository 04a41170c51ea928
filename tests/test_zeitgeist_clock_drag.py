"""Clock drag: one unsigned segment keyed 59 minutes ahead must not move a reader's clock.

The attack: someone who can write the bucket, with no trusted key, writes ONE unsigned
segment whose key is dated 59 minutes ahead (just inside the allowed skew). Readers used
to observe a key's time when they listed it, before any seal was checked: every reader's
HLC jumped 59 minutes ahead, its own segments were stamped that far ahead, and the skew
spread to every peer that read them. Now only a segment read whose seal holds moves the
clock (and the cursor); a correctly signed segment of a trusted peer dated a little ahead
still does, as before.

Peer a runs in-process on its real phases, database, embedding model and a directory
zeitgeist, on a manual clock; peer b publishes through the real log layer, signed with a
key a trusts; the attacker writes the object directly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.config import load_config
from dreamcycle.daemon.cycle import CURSOR_META_KEY, run_cycle_blocking
from dreamcycle.daemon.intake.ingest import ingest
from dreamcycle.daemon.runtime import HLC_META_KEY, Peer, Runtime
from dreamcycle.store.database import NewObservation
from dreamcycle.store.hashing import content_hash
from dreamcycle.zeitgeist.directory import DirectoryBackend
from dreamcycle.zeitgeist.entries import TombstoneEntry, encode_segment
from dreamcycle.zeitgeist.hlc import HybridLogicalClock, hlc_from_ms
from dreamcycle.zeitgeist.log import Zeitgeist
from dreamcycle.zeitgeist.object_keys import parse_segment_key, segment_key
from dreamcycle.zeitgeist.signing import Keyring, Signer, Verifier, generate_key
from tests.daemon_helpers import trust_key
from tests.test_daemon_robustness import paragraphs

START_MS: Final = 1_700_000_000_000
MINUTE_MS: Final = 60_000
#: The attacker's key: just inside the allowed skew (one hour).
DRAG_MS: Final = 59 * MINUTE_MS
#: How far ahead of its wall clock a peer's HLC may be without a trusted peer ahead of it.
SLACK_MS: Final = 5_000
#: Peer b's clock runs this far ahead of a's: a trusted peer "dated a little ahead".
B_AHEAD_MS: Final = 20_000


def tombstone(origin: str, hlc: int, text: str) -> TombstoneEntry:
    """A retraction of a chunk nobody holds: harmless, whoever applies it."""
    return TombstoneEntry(
        hlc=hlc,
        origin=origin,
        content_hash=content_hash(text),
        reason="clock drag test",
        collectable_after_ms=None,
        forget_pulse=None,
    )


def open_victim(tmp_path: Path, clock: ManualClock, *trusted: Signer) -> Peer:
    """Peer a in strict mode (the default), trusting `trusted`."""
    config = load_config(
        environ={},
        overrides={
            "peer.id": "a",
            "peer.data_dir": str(tmp_path / "a"),
            "zeitgeist.dir": str(tmp_path / "zeitgeist"),
            "metrics.listen": "",
            "downscale.enabled": False,
        },
    )
    for signer in trusted:
        trust_key(config.keyring_path, signer)
    return Runtime.open(config, clock=clock).open_peer()


def published_by(peer: Peer, forged: str) -> list[str]:
    """The segment keys `peer` published (under its name, but `forged`), oldest first."""
    listed = DirectoryBackend(peer.config.zeitgeist_dir).list_after("seg/", "")
    return sorted(k for k in listed if parse_segment_key(k).peer_id == peer.peer_id and k != forged)


def ms_of(hlc: int) -> int:
    return HybridLogicalClock.physical_ms(hlc)


def test_an_unsigned_key_59_minutes_ahead_moves_no_clock_a_trusted_one_still_does(
    tmp_path: Path,
) -> None:
    clock = ManualClock(START_MS)
    b_signer = Signer("b", generate_key())
    a = open_victim(tmp_path, clock, b_signer)
    backend = DirectoryBackend(tmp_path / "zeitgeist")
    b_wall = ManualClock(START_MS - 10_000)
    b = Zeitgeist(
        backend, "b", HybridLogicalClock(b_wall.now_ms), wall_ms=b_wall.now_ms, signer=b_signer
    )
    try:
        texts = paragraphs(3)
        ingest(a.runtime, [[NewObservation(content=texts[0])]])

        # The attack: one unsigned object dated 59 minutes ahead, its entry too.
        dragged = hlc_from_ms(START_MS + DRAG_MS)
        forged = tombstone("mallory", dragged, "whatever mallory says")
        forged_key = segment_key(dragged, "mallory", 1)
        backend.create(forged_key, encode_segment([forged]))
        # The same under a's own name (never read by a, but listed).
        as_a = segment_key(dragged + 1, "a", 1_000)
        backend.create(as_a, encode_segment([tombstone("a", dragged, "mallory says a said")]))
        # Beside it, a correctly signed segment of b, ten seconds behind a.
        behind = b.publish(b.prepare([tombstone("b", b.clock.now(), "behind")], 1)).key

        run_cycle_blocking(a)

        # Refused by its seal before a line of it was decoded: read once, and its entry
        # recorded nowhere (a flood of them costs no row).
        assert a.db.segment_applied(forged_key)
        assert not a.db.entry_seen(forged.id)
        assert ms_of(a.clock.last) <= START_MS + SLACK_MS
        assert ms_of(int(a.db.get_meta(HLC_META_KEY) or "0")) <= START_MS + SLACK_MS
        # The cursor follows the data that verified, not the refused key (nor the wall
        # clock of the poll that listed it).
        assert int(a.db.get_meta(CURSOR_META_KEY) or "0") == parse_segment_key(behind).hlc
        published = published_by(a, as_a)
        assert published, "peer a published its chunk's assert"
        assert all(ms_of(parse_segment_key(k).hlc) <= START_MS + SLACK_MS for k in published)

        # Listed again, the refused key is recorded as read: never observed later either.
        clock.advance(1_000)
        run_cycle_blocking(a)
        assert ms_of(a.clock.last) <= clock.now_ms() + SLACK_MS

        # A trusted peer dated a little ahead still moves the clock, as before.
        b_wall.set(clock.now_ms() + B_AHEAD_MS)
        ahead = b.publish(b.prepare([tombstone("b", b.clock.now(), "ahead")], 2)).key
        ingest(a.runtime, [[NewObservation(content=texts[1])]])
        run_cycle_blocking(a)
        assert a.clock.last > parse_segment_key(ahead).hlc
        latest = published_by(a, as_a)[-1]
        assert latest not in published
        assert parse_segment_key(latest).hlc > parse_segment_key(ahead).hlc
        assert ms_of(parse_segment_key(latest).hlc) <= clock.now_ms() + B_AHEAD_MS + SLACK_MS
    finally:
        a.close()
        a.runtime.close()


def test_listing_moves_no_clock_and_only_a_seal_that_holds_does(tmp_path: Path) -> None:
    """The log layer alone: strict readers observe a segment once read and verified;
    permissive readers still observe unsigned ones once read, as before."""
    backend = DirectoryBackend(tmp_path)
    wall = ManualClock(START_MS)
    key = segment_key(hlc_from_ms(START_MS + DRAG_MS), "mallory", 1)
    backend.create(key, encode_segment([tombstone("mallory", hlc_from_ms(START_MS), "m")]))

    def reader(strict: bool) -> Zeitgeist:
        verifier = Verifier(Keyring.of([]), strict=strict)
        return Zeitgeist(
            backend, "r", HybridLogicalClock(wall.now_ms), wall_ms=wall.now_ms, verifier=verifier
        )

    strict, permissive = reader(strict=True), reader(strict=False)
    for log in (strict, permissive):
        assert log.poll(0, lambda k: False) == [key]
        assert ms_of(log.clock.last) == 0  # listed, not read: not observed

    assert strict.check_read(key, strict.fetch(key)) is not None
    assert ms_of(strict.clock.now()) == START_MS
    assert strict.cursor_for(parse_segment_key(key).hlc) == 0

    assert permissive.check_read(key, permissive.fetch(key)) is None
    assert permissive.clock.now() > parse_segment_key(key).hlc
