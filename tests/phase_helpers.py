"""What the tests of the dream cycle's phases share (tests/test_phase_<name>.py).

One small store of real sentences, embedded once per test process and copied into each
test's own directory; a peer opened on it with a ManualClock; another peer's signed
segments written into the shared log with the real codec; entries queued in the outbox as
`pulse-emit` queues them; the earlier phases run before the one under test; and the rows
of every table, to tell what a phase changed from what it left alone.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest

from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.config import Config, load_config
from dreamcycle.daemon.cycle import PHASES, CycleState
from dreamcycle.daemon.intake.emit import Emitted
from dreamcycle.daemon.intake.emit_pulses import PulseRequest, emit_pulse
from dreamcycle.daemon.intake.ingest import ingest
from dreamcycle.daemon.runtime import Peer, Runtime
from dreamcycle.pulses.pulse import PulseKind, SalientPulse
from dreamcycle.store.database import Database, NewObservation
from dreamcycle.zeitgeist.directory import DirectoryBackend
from dreamcycle.zeitgeist.entries import Entry, PulseEntry, decode_entry, encode_segment
from dreamcycle.zeitgeist.hlc import hlc_from_ms
from dreamcycle.zeitgeist.object_keys import segment_key
from dreamcycle.zeitgeist.signing import Signer, generate_key
from tests.daemon_helpers import trust_key

START_MS: Final = 1_800_000_000_000
MINUTE_MS: Final = 60_000
HOUR_MS: Final = 60 * MINUTE_MS
DAY_MS: Final = 24 * HOUR_MS
PEER_ID: Final = "a"
OTHER_ID: Final = "b"

#: Four topics of three notes, and four facts: neighbours within a topic, none across.
NOTES: Final = (
    "The cat slept on the warm windowsill all afternoon.",
    "A dog barked at the mail carrier every morning.",
    "Kittens chase balls of yarn across the kitchen floor.",
    "Heavy rain flooded the streets of the old town.",
    "Snow fell quietly over the mountain village overnight.",
    "A thunderstorm knocked out power across the city.",
    "Knead the bread dough for ten minutes before it rises.",
    "Simmer the tomato sauce slowly with garlic and basil.",
    "Fresh pasta cooks in boiling salted water in three minutes.",
    "Python lists grow and shrink as items are appended or removed.",
    "A hash map finds a value by its key in constant time.",
    "Unit tests check that each function returns what it should.",
)
FACTS: Final = (
    "The Moon orbits the Earth about once every twenty-seven days.",
    "Mars has two small moons named Phobos and Deimos.",
    "Jupiter is the largest planet in the solar system.",
    "Light from the Sun reaches the Earth in about eight minutes.",
)
SENTENCES: Final = NOTES + FACTS
#: Rows of `observations`, in the order ingested.
ROWIDS: Final = tuple(range(1, len(SENTENCES) + 1))

#: Tables no phase writes: SQLite's own (sequences, planner statistics), the migrations.
_NOT_COMPARED: Final = ("sqlite_", "schema_migrations")


class Killed(BaseException):
    """Stands for kill -9 inside a phase: no handler catches it, nothing after it runs."""


def phase_config(root: Path, **overrides: Any) -> Config:
    """Peer `a` under `root`, its log in `root/zeitgeist`: no metrics port, no efficacy
    records, segments read directly (no roll-ups), days of accounted time per cycle."""
    return load_config(
        None,
        environ={},
        overrides={
            "peer.id": PEER_ID,
            "peer.data_dir": str(root / PEER_ID),
            "zeitgeist.dir": str(root / "zeitgeist"),
            "zeitgeist.rollups": False,
            "metrics.listen": "",
            "efficacy.enabled": False,
            "sweep.enabled": False,
            "clock.max_step_s": 30 * DAY_MS / 1000,
            **overrides,
        },
    )


_templates: dict[str, Path] = {}


def template(factory: pytest.TempPathFactory) -> Path:
    """A data directory holding SENTENCES ingested (embedded, not yet admitted by a cycle)
    at START_MS; made once per test process, copied by every test."""
    if "store" not in _templates:
        root = factory.mktemp("phase-template")
        rt = Runtime.open(phase_config(root), clock=ManualClock(START_MS))
        try:
            items = [NewObservation(content=s, kind="note") for s in NOTES]
            items += [NewObservation(content=s, kind="fact") for s in FACTS]
            ingest(rt, [items])
        finally:
            rt.close()
        _templates["store"] = root / PEER_ID
    return _templates["store"]


@contextmanager
def opened_peer(root: Path, clock: ManualClock, **overrides: Any) -> Iterator[Peer]:
    """A peer on the data directory under `root` (as a daemon start opens it); closed after."""
    rt = Runtime.open(phase_config(root, **overrides), clock=clock)
    try:
        peer = rt.open_peer()
        try:
            yield peer
        finally:
            peer.close()
    finally:
        rt.close()


@contextmanager
def fresh_peer(
    factory: pytest.TempPathFactory, root: Path, clock: ManualClock, **overrides: Any
) -> Iterator[Peer]:
    """A peer on a copy of the template under `root`."""
    shutil.copytree(template(factory), root / PEER_ID)
    with opened_peer(root, clock, **overrides) as peer:
        yield peer


def run_until(peer: Peer, phase: str, st: CycleState | None = None) -> CycleState:
    """The phases before `phase`, in order, on one cycle's state (returned for `phase`)."""
    st = st if st is not None else CycleState(now_ms=peer.now_ms())
    names = [name for name, _ in PHASES]
    for name, run in PHASES[: names.index(phase)]:
        st.stats[name] = run(peer, st)
    return st


def run_phase(peer: Peer, phase: str, st: CycleState) -> dict[str, Any]:
    stats = dict(PHASES)[phase](peer, st)
    st.stats[phase] = stats
    return stats


# ---- what the store holds --------------------------------------------------------------


def tables(db: Database) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table (full-text indexes included), each table's rows sorted."""
    names = [
        str(r[0])
        for r in db.fetch_all("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        if not str(r[0]).startswith(_NOT_COMPARED)
    ]
    return {name: sorted(db.fetch_all(f'SELECT * FROM "{name}"'), key=repr) for name in names}


def changed_tables(
    before: dict[str, list[tuple[Any, ...]]], after: dict[str, list[tuple[Any, ...]]]
) -> set[str]:
    """The tables whose rows differ, full-text shadow tables folded into their index."""
    changed = {name for name in after if before.get(name) != after[name]}
    return {name.split("_fts")[0] + "_fts" if "_fts" in name else name for name in changed}


def scalar(db: Database, sql: str, params: Sequence[Any] = ()) -> Any:
    row = db.fetch_one(sql, tuple(params))
    assert row is not None, sql
    return row[0]


def saliences(db: Database) -> dict[int, float]:
    """Stored salience of every chunk (the daemon's own efficacy rows left out)."""
    return {
        int(r[0]): float(r[1])
        for r in db.fetch_all("SELECT id, salience FROM observations WHERE type != 'efficacy'")
    }


def content_hashes(db: Database) -> dict[int, str]:
    return {int(r[0]): str(r[1]) for r in db.fetch_all("SELECT id, content_hash FROM observations")}


def entry_statuses(db: Database) -> dict[str, str]:
    """Entry id -> status, of every entry recorded in `seen_entries`."""
    return {str(r[0]): str(r[1]) for r in db.fetch_all("SELECT entry_id, status FROM seen_entries")}


# ---- entries ---------------------------------------------------------------------------


def seeded_pulse(
    peer: Peer,
    rowid: int,
    *,
    origin: str = PEER_ID,
    hlc: int,
    kind: PulseKind = PulseKind.REWARD,
    strength: float = 0.4,
    k: int = 2,
    max_hops: int = 1,
) -> SalientPulse:
    """A pulse seeded at chunk `rowid`'s stored embedding, as `pulse-emit --seed-chunk` makes."""
    digest = content_hashes(peer.db)[rowid]
    seed = peer.db.embedding_of_hash(digest, peer.embedder.index_version)
    assert seed is not None, f"chunk {rowid} has no stored embedding"
    return SalientPulse(
        seed_embedding=seed, kind=kind, strength=strength, sigma=0.5, max_hops=max_hops, k=k,
        decay_per_hop=0.3, ts=hlc, origin_peer=origin, reason="test",
        ttl_s=7 * DAY_MS / 1000, index_version=peer.embedder.index_version, seed_hash=digest,
    ).with_id()  # fmt: skip


def queued(peer: Peer, emitted: Emitted) -> Entry:
    """The entry a `pulse-emit` request (daemon/intake/emit*.py) queued, from the outbox."""
    assert emitted.new, f"{emitted.entry_id} was queued before"
    row = peer.db.fetch_one("SELECT body FROM outbox WHERE entry_id = ?", (emitted.entry_id,))
    assert row is not None, emitted.entry_id
    return decode_entry(json.loads(row[0]))


def queue_pulse(
    peer: Peer,
    rowid: int,
    *,
    kind: PulseKind = PulseKind.REWARD,
    strength: float = 0.4,
    nonce: str = "",
) -> PulseEntry:
    """A pulse seeded at chunk `rowid`, queued as `pulse-emit pulse --seed-chunk` queues it."""
    request = PulseRequest(
        text="", kind=kind, strength=strength, sigma=0.5, k=2, max_hops=1, decay_per_hop=0.3,
        ttl_s=7 * DAY_MS / 1000, reason="test", nonce=nonce,
        seed_chunk=content_hashes(peer.db)[rowid],
    )  # fmt: skip
    entry = queued(peer, emit_pulse(peer.runtime, request))
    assert isinstance(entry, PulseEntry)
    return entry


@dataclass
class OtherPeer:
    """Another peer: writes signed, sealed segments into the shared log with the real codec."""

    signer: Signer
    log_dir: Path
    seq: int = 0

    def publish(self, entries: Sequence[Entry], at_ms: int) -> str:
        """A segment of `entries` keyed at `at_ms`; its key."""
        self.seq += 1
        key = segment_key(hlc_from_ms(at_ms), self.signer.peer_id, self.seq)
        signed = [self.signer.sign_entry(entry) for entry in entries]
        data = encode_segment(signed, seal=lambda digest: self.signer.seal(key, digest))
        DirectoryBackend(self.log_dir).create(key, data)
        return key


def other_peer(peer: Peer, *, trusted: bool = True, peer_id: str = OTHER_ID) -> OtherPeer:
    """Another peer writing into `peer`'s log, its key in `peer`'s keyring when `trusted`."""
    signer = Signer(peer_id, generate_key())
    if trusted:
        trust_key(peer.config.keyring_path, signer)
    return OtherPeer(signer, peer.config.zeitgeist_dir)
