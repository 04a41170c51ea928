"""The cycle's dispatch tables cover what they dispatch on: every structural entry kind has
a handler in reconsolidate, and every journal kind, which the schema lists too, a replay
step in rebuild."""

from __future__ import annotations

import re
from pathlib import Path

import apsw
import pytest

from dreamcycle.daemon.config import load_config
from dreamcycle.daemon.cycle.reconsolidate import HANDLERS
from dreamcycle.daemon.journal_kinds import JournalKind
from dreamcycle.daemon.rebuild import STEPS
from dreamcycle.daemon.runtime import Runtime
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
