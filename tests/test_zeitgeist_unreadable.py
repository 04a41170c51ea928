"""A segment of a directory zeitgeist that this process may not read.

A segment file found in a folder this process can search, yet not readable for a reason
about that file alone (its mode or owner), is an unreadable object: the store answered,
so it is no outage, and a cycle reads the segments after it while the cursor stays before
it, so that it is read once it can be. It is never refused: the usual cause, peers that
may not read each other's files, is fixed by an operator, and a refused segment would be
skipped for good. A folder that cannot be searched is an outage; a file removed between
the listing and the read is absent.

Files are made unreadable with chmod 000. A process that reads them all the same (root
with CAP_DAC_OVERRIDE) has its reads of that one file fail as the system would fail them
instead, so the cycle's handling runs wherever the tests run; run as another user, or as
root under `setpriv --bounding-set=-dac_override,-dac_read_search,-fowner`, the system
refuses the reads itself.
"""

from __future__ import annotations

import builtins
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.cycle import run_cycle_blocking
from dreamcycle.daemon.cycle._position import cursor, key_hlc
from dreamcycle.daemon.intake.ingest import ingest
from dreamcycle.daemon.runtime import Peer
from dreamcycle.store.database import NewObservation
from dreamcycle.zeitgeist import directory
from dreamcycle.zeitgeist.backend import BackendError, UnreadableObject
from dreamcycle.zeitgeist.directory import DirectoryBackend
from dreamcycle.zeitgeist.entries import ReconsolidateEntry, encode_segment
from dreamcycle.zeitgeist.hlc import HybridLogicalClock, hlc_from_ms
from dreamcycle.zeitgeist.log import Zeitgeist
from dreamcycle.zeitgeist.object_keys import SEGMENT_PREFIX, heartbeat_key, segment_key
from tests.test_daemon_robustness import entry_status, open_peer, paragraphs, publish_as

NOW_MS: Final = 1_750_000_000_000
WINDOW_MS: Final = 60_000
#: A folder whose names can be listed but not looked up: read and write, no search.
LISTABLE_NOT_SEARCHABLE: Final = stat.S_IRUSR | stat.S_IWUSR
FOLDER_MODE: Final = 0o755
FILE_MODE: Final = 0o644


def rename(hlc: int, origin: str, title: str) -> ReconsolidateEntry:
    return ReconsolidateEntry(
        hlc=hlc, origin=origin, content_hash="ab" * 32, changes={"title": title}
    )


def reads_anyway(path: Path) -> bool:
    try:
        with open(path, "rb"):
            return True
    except PermissionError:
        return False


@pytest.fixture
def make_unreadable(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """chmod 000 on a file; where this process reads it all the same, the backend's opens
    of it fail as the system fails them for anyone else. Modes are given back after."""
    made: list[Path] = []
    real_open = builtins.open

    def refusing_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        if Path(file) in made and os.stat(file).st_mode & 0o777 == 0:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(file))
        return real_open(file, *args, **kwargs)

    def unreadable(path: Path) -> None:
        os.chmod(path, 0)
        made.append(path)
        if reads_anyway(path):
            monkeypatch.setattr(directory, "open", refusing_open, raising=False)

    yield unreadable
    for path in made:
        if path.exists():
            os.chmod(path, FILE_MODE)


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "zeitgeist"
    yield root
    for folder in [root, *(path for path in root.rglob("*") if path.is_dir())]:
        os.chmod(folder, FOLDER_MODE)


def test_an_unreadable_segment_is_an_unreadable_object_and_the_ones_after_it_are_read(
    root: Path, make_unreadable: Any
) -> None:
    backend = DirectoryBackend(root)
    clock = ManualClock(NOW_MS)
    log = Zeitgeist(
        backend,
        "reader",
        HybridLogicalClock(clock.now_ms),
        wall_ms=clock.now_ms,
        window_ms=WINDOW_MS,
    )
    locked = segment_key(hlc_from_ms(NOW_MS - 3_000), "carol", 1)
    backend.create(locked, encode_segment([rename(hlc_from_ms(NOW_MS - 3_000), "carol", "c")]))
    make_unreadable(root / locked)
    later = [rename(hlc_from_ms(NOW_MS - 2_000) + seq, "bob", f"title {seq}") for seq in range(2)]
    writer = Zeitgeist(backend, "bob", HybridLogicalClock(clock.now_ms), wall_ms=clock.now_ms)
    for seq, entry in enumerate(later, start=1):
        writer.publish(writer.prepare([entry], seq))

    keys = log.poll(0, lambda key: False)
    assert keys[0] == locked and len(keys) == 3
    for _ in range(3):  # never turned into a refusal, however often it is read
        with pytest.raises(UnreadableObject, match="Permission denied"):
            log.fetch(locked)
    assert [log.fetch(key).entries for key in keys[1:]] == [[entry] for entry in later]


def test_a_folder_that_cannot_be_searched_is_an_outage(root: Path) -> None:
    backend = DirectoryBackend(root)
    key = segment_key(hlc_from_ms(NOW_MS), "bob", 1)
    backend.create(key, b"bytes")
    folder = root / SEGMENT_PREFIX.rstrip("/")
    os.chmod(folder, LISTABLE_NOT_SEARCHABLE)
    if reads_anyway(root / key):
        pytest.skip("this process searches folders whatever their mode")
    with pytest.raises(BackendError, match="Permission denied") as failed:
        backend.read(key)
    assert not isinstance(failed.value, UnreadableObject)
    os.chmod(folder, FOLDER_MODE)
    assert backend.read(key) == b"bytes"


def test_a_heartbeat_that_cannot_be_read_stays_an_outage(root: Path) -> None:
    backend = DirectoryBackend(root)
    looped = heartbeat_key("mallory")
    backend.write_overwrite(heartbeat_key("alice"), b"{}")
    (root / looped).symlink_to((root / looped).name)  # a link loop: no one can open it
    with pytest.raises(BackendError) as failed:
        backend.read_versioned(looped)
    assert not isinstance(failed.value, UnreadableObject)


def test_a_segment_removed_between_listing_and_reading_is_absent(root: Path) -> None:
    backend = DirectoryBackend(root)
    clock = ManualClock(NOW_MS)
    log = Zeitgeist(backend, "reader", HybridLogicalClock(clock.now_ms), wall_ms=clock.now_ms)
    key = segment_key(hlc_from_ms(NOW_MS - 1_000), "bob", 1)
    backend.create(key, encode_segment([rename(hlc_from_ms(NOW_MS - 1_000), "bob", "t")]))
    assert log.poll(0, lambda listed: False) == [key]
    backend.delete([key])
    with pytest.raises(KeyError):
        log.fetch(key)


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[Peer]:
    peer = open_peer(tmp_path)
    ingest(peer.runtime, [[NewObservation(content=text) for text in paragraphs(4)]])
    run_cycle_blocking(peer)
    yield peer
    peer.close()
    peer.runtime.close()


def test_a_cycle_reads_past_an_unreadable_segment_and_reads_it_once_it_can(
    peer: Peer, tmp_path: Path, make_unreadable: Any
) -> None:
    chunk = peer.db.observation(1)
    assert chunk is not None

    def renamed(title: str) -> ReconsolidateEntry:
        return ReconsolidateEntry(
            hlc=HybridLogicalClock(peer.runtime.clock.now_ms).now(),
            origin="bob",
            content_hash=chunk.content_hash,
            changes={"title": title},
        )

    first = renamed("first")
    locked = publish_as(tmp_path, "bob", [first], seq=1)
    make_unreadable(tmp_path / "zeitgeist" / locked)
    second = renamed("second")
    after = publish_as(tmp_path, "bob", [second], seq=2)
    assert locked < after

    for _ in range(2):
        state = run_cycle_blocking(peer)
        assert state.stats["scan"]["unreadable"] == 1
        assert peer.db.segment_applied(after) and not peer.db.segment_applied(locked)
        assert entry_status(peer, second) == ("applied", None)
        # The next listing must hold it again: the cursor stays before it.
        assert cursor(peer) <= key_hlc(locked)
        assert peer.backend_health is not None and peer.backend_health.reachable is True

    os.chmod(tmp_path / "zeitgeist" / locked, FILE_MODE)
    state = run_cycle_blocking(peer)
    assert state.stats["scan"]["unreadable"] == 0
    assert state.stats["scan"]["fetched"] == 1
    assert peer.db.segment_applied(locked)
    assert entry_status(peer, first)[0] == "applied"
    assert cursor(peer) >= key_hlc(locked)
