"""Edits queued for the next cycle that would contradict each other are refused when asked
for, through a real daemon: applied in order, an edit and its undo would retract both
versions of a memory, and two edits of one version would leave two successors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dreamcycle.daemon.api.client import MemoryClient
from dreamcycle.daemon.api.client_errors import Conflict, NotFound
from dreamcycle.store.hashing import content_hash
from tests.api_helpers import running_api, wait_applied
from tests.daemon_helpers import Peer, wait_until

pytestmark = pytest.mark.slow

MONTHLY = "The staging database password rotates monthly."
WEEKLY = "The staging database password rotates weekly."
DAILY = "The staging database password rotates daily."
FRIDAY = "Deploys freeze on Friday afternoons."


def test_an_undo_a_second_edit_and_an_edit_of_a_deleted_memory_wait_for_the_cycle(
    tmp_path: Path,
) -> None:
    peer = Peer(tmp_path / "data", "edits", tmp_path / "zeitgeist")
    # No cycle while the edits are asked for (the first one runs at start).
    with running_api(peer, interval_s="3600") as served, MemoryClient(served.socket_path) as m:
        wait_until(lambda: peer.cycles_done() >= 1, what="the first cycle")
        monthly = m.save(MONTHLY).content_hash
        weekly = m.update(monthly, content=WEEKLY, reason="rotation changed")
        assert weekly.superseded is not None
        with pytest.raises(Conflict, match="queued to be retracted"):
            m.update(weekly.content_hash, content=MONTHLY, reason="undo")
        with pytest.raises(Conflict, match=f"queued to be superseded by {weekly.content_hash}"):
            m.update(monthly, content=DAILY, reason="second edit of the old version")
        friday = m.save(FRIDAY).content_hash
        deleted = m.tombstone(friday, reason="no longer true")
        with pytest.raises(Conflict, match="queued to be retracted"):
            m.update(friday, content="Deploys freeze on Thursday afternoons.", reason="moved")
        # A refused edit stored nothing: its content is not a memory.
        with pytest.raises(NotFound):
            m.memory(content_hash(DAILY))
    with running_api(peer) as served, MemoryClient(served.socket_path) as m:
        wait_applied(served, weekly.superseded.queued.entry_id)
        wait_applied(served, deleted.entry_id)
        assert m.memory(monthly).state == "tombstoned"
        assert m.memory(weekly.content_hash).state == "live"
        assert m.memory(friday).state == "tombstoned"
        found = m.recall("how often does the staging password rotate", record=False).hits
        assert found[0].content_hash == weekly.content_hash


def test_an_update_keeps_what_ingest_stored_within_the_same_limits(tmp_path: Path) -> None:
    # A title far longer than a short label, as ingest and peers' entries may carry: the
    # API takes the same limits, so an update keeps it as it is.
    long_title = "T" * 1_500
    notes = tmp_path / "notes.jsonl"
    notes.write_text(json.dumps({"content": MONTHLY, "title": long_title}) + "\n")
    peer = Peer(tmp_path / "data", "edits", tmp_path / "zeitgeist")
    with running_api(peer) as served, MemoryClient(served.socket_path) as m:
        peer.dreamcycle("ingest", "--direct", str(notes))
        old = content_hash(MONTHLY)
        assert m.memory(old).title == long_title
        updated = m.update(old, content=WEEKLY, reason="rotation changed")
        assert m.memory(updated.content_hash).title == long_title
