"""The cycle's dispatch tables cover what they dispatch on: every structural entry kind has
a handler in reconsolidate, and every journal kind, which the schema lists too, a replay
step in rebuild."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import apsw
import pytest
import trio

from dreamcycle.daemon.config import load_config
from dreamcycle.daemon.cycle import PHASES, CycleState, run_phases
from dreamcycle.daemon.cycle.reconsolidate import HANDLERS
from dreamcycle.daemon.journal_kinds import JournalKind
from dreamcycle.daemon.memory.rebuild import STEPS
from dreamcycle.daemon.runtime import Peer, Runtime
from dreamcycle.zeitgeist.entries import ENTRY_TYPES, PulseEntry


def test_every_structural_entry_kind_has_a_handler() -> None:
    # Pulses are the next phase's: they propagate after every structural entry applied.
    assert set(HANDLERS) == set(ENTRY_TYPES.values()) - {PulseEntry}


def test_every_journal_kind_replays() -> None:
    assert set(STEPS) == set(JournalKind)


def test_the_journal_table_takes_exactly_the_journal_kinds(tmp_path: Path) -> None:
    """The schema's CHECK and the enum list the same kinds: a kind added to one alone
    would fail at its first write, or leave replay a step it cannot read."""
    config = load_config(
        None,
        environ={},
        overrides={"peer.data_dir": str(tmp_path), "peer.id": "p", "metrics.listen": ""},
    )
    rt = Runtime.open(config)
    try:
        (sql,) = rt.db.fetch_one("SELECT sql FROM sqlite_master WHERE name = 'journal'")
        listed = re.search(r"kind IN \(([^)]*)\)", str(sql))
        assert listed is not None, sql
        assert set(re.findall(r"'(\w+)'", listed.group(1))) == {kind.value for kind in JournalKind}
        with rt.db.transaction(), pytest.raises(apsw.ConstraintError):
            rt.db.journal("teleport", "x", {}, now_ms=0)
    finally:
        rt.close()


def test_a_peer_is_marked_cycling_while_its_phases_run_and_only_then() -> None:
    """The API reads `peer.cycling` to know whether a cycle takes a core (daemon/api/
    served_peer.py): set through every phase, cleared after the last and after a failure."""
    peer = cast(Peer, SimpleNamespace(cycling=False))
    seen: list[tuple[str, bool]] = []

    async def observe(name: str, phase: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        seen.append((name, peer.cycling))
        if name == "fail":
            raise RuntimeError("a phase failed")
        return {}

    assert trio.run(run_phases, peer, CycleState(now_ms=0), observe, lambda: False)
    assert [name for name, _ in seen] == [name for name, _ in PHASES]
    assert all(cycling for _, cycling in seen) and not peer.cycling

    async def failing(name: str, phase: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        return await observe("fail", phase)

    with pytest.raises(RuntimeError, match="a phase failed"):
        trio.run(run_phases, peer, CycleState(now_ms=0), failing, lambda: False)
    assert seen[-1] == ("fail", True) and not peer.cycling
