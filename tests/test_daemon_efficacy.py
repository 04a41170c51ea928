"""Efficacy metrics measured during dream cycles: recorded rows, gauges, the CLI's A/B."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest

from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.config import Config, load_config
from dreamcycle.daemon.cycle import run_cycle_blocking
from dreamcycle.daemon.cycle.efficacy import (
    LAST_EFFICACY_META_KEY,
    Inputs,
    gather,
    learned,
    maybe_record,
    topic_key,
    window_label,
)
from dreamcycle.daemon.intake.emit_outcomes import emit_outcome
from dreamcycle.daemon.intake.ingest import ingest
from dreamcycle.daemon.observe import metrics
from dreamcycle.daemon.recall.retrieve import recall
from dreamcycle.daemon.runtime import Peer as DaemonPeer
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.pulses.efficacy import (
    ATTRIBUTION_CORRELATION,
    COUNTERFACTUAL_REPLAY,
    METRICS,
    RECALL_HIT_RATE,
)
from dreamcycle.store import efficacy_rows
from dreamcycle.store.database import EFFICACY_TYPE, Database, NewObservation
from dreamcycle.store.index import HnswIndex
from dreamcycle.store.lexical import search_lexical
from tests.daemon_helpers import Peer, documentation_chunks

#: 2023-11-14T22:13:20Z, as in the clock tests.
START_MS: Final = 1_700_000_000_000
MINUTE_MS: Final = 60_000
WINDOW: Final = "7d"
TOPICS: Final = ("if", "while", "for", "try", "with")


def _config(tmp: Path, **overrides: Any) -> Config:
    return load_config(
        environ={},
        overrides={
            "peer.id": "a",
            "peer.data_dir": str(tmp / "a"),
            "zeitgeist.dir": str(tmp / "zeitgeist"),
            "metrics.listen": "",
            **overrides,
        },
    )


def _rows(db: Database) -> dict[str, efficacy_rows.EfficacyRow]:
    return {row.topic_key: row for row in efficacy_rows.efficacy_rows(db)}


def _data(peer: Peer) -> list[str]:
    """The database as SQL, without the line that says planner statistics exist: the first
    connection to close (here the CLI's) creates them; they describe data, they are not data."""
    return [line for line in peer.dump() if not line.startswith("ANALYZE ")]


def _gauge(metric: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(
        "dreamcycle_efficacy", {"metric": metric, "window": WINDOW}
    )


# ---- a small peer that recalled, was told what helped, and dreamed ------------------------


@dataclass
class Scenario:
    tmp: Path
    config: Config
    clock: ManualClock
    rt: Runtime
    peer: DaemonPeer
    rewarded: list[str]  # content hashes cited by a Reward of 1
    punished: str  # content hash cited by a Reward of -1
    first: dict[str, Any]  # promote's efficacy stats, first cycle
    skipped: dict[str, Any]  # ... the cycle that applied the outcomes (not due)
    second: dict[str, Any]  # ... one interval later
    rows_after_first: dict[str, efficacy_rows.EfficacyRow]


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    tmp = tmp_path_factory.mktemp("efficacy")
    config = _config(tmp)
    clock = ManualClock(START_MS)
    rt = Runtime.open(config, clock=clock)
    chunks = documentation_chunks(TOPICS)
    ingest(
        rt,
        [
            [
                NewObservation(content=c["content"], title=c["title"], topic_key=c["topic_key"])
                for c in chunks
            ]
        ],
    )
    peer = rt.open_peer()
    try:
        first = run_cycle_blocking(peer).stats["promote"]["efficacy"]
        rows_after_first = _rows(rt.db)

        def cite(query: str, reward: float) -> str:
            result = recall(rt, query, index=peer.index)
            assert result.decision_hash is not None
            chosen = result.hits[0].content_hash
            emit_outcome(
                rt, decision=result.decision_hash, reward=reward, reason="test", cited=[chosen]
            )
            return chosen

        clock.advance(MINUTE_MS)
        recall(rt, "what does the with statement guarantee about __exit__", index=peer.index)
        rewarded = [
            cite("how does a while loop repeat while the expression is true", 1.0),
            cite("the for statement iterates over the elements of an iterable", 1.0),
        ]
        punished = cite("which except clause handles an ExceptionGroup", -1.0)
        assert len({*rewarded, punished}) == 3, "pick queries whose best hits differ"
        clock.advance(MINUTE_MS)
        skipped = run_cycle_blocking(peer).stats["promote"]["efficacy"]
        clock.advance(int(config.efficacy.interval_s * 1000))
        second = run_cycle_blocking(peer).stats["promote"]["efficacy"]
        yield Scenario(
            tmp,
            config,
            clock,
            rt,
            peer,
            rewarded,
            punished,
            first,
            skipped,
            second,
            rows_after_first,
        )
    finally:
        peer.close()
        rt.close()


def test_the_first_cycle_records_one_row_per_metric(scenario: Scenario) -> None:
    assert scenario.first["created"] == 3 and scenario.first["updated"] == 0
    assert sorted(scenario.rows_after_first) == sorted(topic_key(m, WINDOW) for m in METRICS)
    for metric in METRICS:
        row = scenario.rows_after_first[f"efficacy/{metric}/{WINDOW}"]
        assert row.title == metric and row.revision_count == 1
        assert metric in row.content and WINDOW in row.content
    # Nothing was decided yet: nothing to measure.
    assert scenario.first[RECALL_HIT_RATE] is None


def test_a_run_before_the_interval_is_skipped(scenario: Scenario) -> None:
    assert scenario.skipped == {"skipped": "not due"}


def test_a_later_run_updates_the_rows_in_place(scenario: Scenario) -> None:
    db = scenario.rt.db
    assert scenario.second["created"] == 0 and scenario.second["updated"] == 3
    rows = _rows(db)
    assert sorted(rows) == sorted(scenario.rows_after_first)
    for key, row in rows.items():
        before = scenario.rows_after_first[key]
        assert row.rowid == before.rowid
        assert row.revision_count == 2
        assert row.content != before.content
    (count,) = db.fetch_one("SELECT count(*) FROM observations WHERE type = ?", (EFFICACY_TYPE,))
    assert count == 3
    for digest, normalized, kind, importance, policy in db.fetch_all(
        "SELECT content_hash, normalized_hash, kind, importance, deletion_policy "
        "FROM observations WHERE type = ?",
        (EFFICACY_TYPE,),
    ):
        assert (kind, importance, policy) == ("summary", 0, "never")
        assert digest == normalized
    assert db.get_meta(LAST_EFFICACY_META_KEY) == str(scenario.clock.now_ms())


def test_the_metrics_measure_what_was_learned(scenario: Scenario) -> None:
    values = scenario.second
    hit_rate = values[RECALL_HIT_RATE]
    assert hit_rate is not None and 0.0 <= hit_rate <= 1.0
    assert values["n"][RECALL_HIT_RATE] == 4  # four recalls, all in the window
    # Both successful decisions are replayed and still find what they cited.
    assert values["n"][COUNTERFACTUAL_REPLAY] == 2
    assert values[COUNTERFACTUAL_REPLAY] == 1.0
    row = _rows(scenario.rt.db)[topic_key(RECALL_HIT_RATE, WINDOW)]
    assert f"{hit_rate:.3f}" in row.content and "4 decisions" in row.content


def test_attribution_correlation_by_hand(scenario: Scenario) -> None:
    """Credits: +1, +1 on the rewarded chunks, -1 on the punished one."""
    db = scenario.rt.db
    salience = {
        digest: obs.salience
        for digest in [*scenario.rewarded, scenario.punished]
        if (obs := db.observation_by_hash(digest)) is not None
    }
    a, b = (salience[d] for d in scenario.rewarded)
    assert salience[scenario.punished] < min(a, b)  # the pulses did their work
    # Credit ranks (1.5, 1.5, 0); salience ranks (1.5, 1.5, 0) when the rewarded tie, else
    # (1, 2, 0): Spearman is 1, else 0.5 / sqrt(0.5 * 2/3) = sqrt(3)/2.
    expected = 1.0 if a == b else math.sqrt(3) / 2
    assert scenario.second[ATTRIBUTION_CORRELATION] == pytest.approx(expected)
    assert scenario.second["n"][ATTRIBUTION_CORRELATION] == 3


def test_the_gauges_hold_the_values(scenario: Scenario) -> None:
    for metric in METRICS:
        value = scenario.second[metric]
        assert value is not None
        assert _gauge(metric) == pytest.approx(value)


def test_efficacy_rows_are_never_admitted_indexed_or_recalled(scenario: Scenario) -> None:
    rt, peer = scenario.rt, scenario.peer
    ids = efficacy_rows.efficacy_rowids(rt.db)
    assert len(ids) == 3
    for rowid in ids:
        row = rt.db.fetch_one(
            "SELECT admitted_seq, embedding, index_version FROM observations WHERE id = ?",
            (rowid,),
        )
        assert tuple(row) == (0, None, None)
        assert not peer.index.contains(rowid)
    saved = HnswIndex.load(scenario.config.index_path, rt.embedder.dim, rt.embedder.index_version)
    assert not ids & saved.labels()
    assert saved.stamp == rt.db.change_stamp()  # saved after the rows were written
    (journaled,) = rt.db.fetch_one(
        "SELECT count(*) FROM journal WHERE kind = 'chunk' AND ref IN "
        "(SELECT content_hash FROM observations WHERE type = ?)",
        (EFFICACY_TYPE,),
    )
    assert journaled == 0
    query = "efficacy recall_hit_rate attribution_salience_correlation counterfactual_replay"
    assert not ids & set(search_lexical(rt.db, query, 50, cold=None))
    hits = recall(rt, query, top_k=50, record=False, index=peer.index).hits
    assert hits and not ids & {h.rowid for h in hits}
    assert rt.db.pending_admission(100) == []


def test_the_cli_compares_both_rules(scenario: Scenario) -> None:
    # The CLI runs in its own process: it shares the test's simulated time through a file.
    clock_file = scenario.tmp / "clock"
    clock_file.write_text(str(scenario.clock.now_ms()), encoding="utf-8")
    cli = Peer(scenario.config.data_dir, "a", scenario.tmp / "zeitgeist")
    settings = {"DREAMCYCLE_CLOCK_SOURCE": "file", "DREAMCYCLE_CLOCK_FILE": str(clock_file)}
    before = _data(cli)
    text = cli.dreamcycle("efficacy", "--rule", "literal", settings=settings).stdout
    assert "bfs (replayed)" in text and "literal (replayed)" in text and "current" in text
    for metric in METRICS:
        assert metric in text
    assert "counterfactual_replay is the current state's" in text
    report = json.loads(
        cli.dreamcycle("efficacy", "--rule", "literal", "--json", settings=settings).stdout
    )
    assert report["window"] == WINDOW and report["configured_rule"] == "bfs"
    assert sorted(report["replayed"]) == ["bfs", "literal"]
    current = report["current"]
    for metric in METRICS:
        assert current[metric]["value"] == pytest.approx(scenario.second[metric])
    for rule in ("bfs", "literal"):
        replayed = report["replayed"][rule]
        assert replayed[COUNTERFACTUAL_REPLAY] == current[COUNTERFACTUAL_REPLAY]
        assert replayed[RECALL_HIT_RATE]["n"] == 4
    # Replaying under the rule it ran with reproduces the live state.
    for metric in (RECALL_HIT_RATE, ATTRIBUTION_CORRELATION):
        assert report["replayed"]["bfs"][metric]["value"] == pytest.approx(current[metric]["value"])
    plain = cli.dreamcycle("efficacy", "--window-s", "3600", settings=settings).stdout
    assert "replayed" not in plain and "last 1h" in plain
    assert _data(cli) == before  # read-only


# ---- smaller pieces -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("window_s", "label"),
    [(7 * 86_400, "7d"), (86_400.0, "1d"), (7_200, "2h"), (90, "90s"), (1.5, "1.5s")],
)
def test_window_labels(window_s: float, label: str) -> None:
    assert window_label(window_s) == label


def test_credit_sums_rewards_of_converted_outcomes(tmp_path: Path) -> None:
    db = Database(tmp_path / "db.sqlite")
    try:
        with db.transaction():
            added = db.add_observations(
                [NewObservation(content=f"chunk number {i}") for i in range(4)], now_ms=START_MS
            )
        h = [a.content_hash for a in added]
        r = [a.rowid for a in added]

        def decide(name: str, chunks: list[str], ts_ms: int) -> None:
            db.record_attribution(
                name, chunks, peer="a", hlc=ts_ms, ts_ms=ts_ms, decision_text=name
            )

        def outcome(name: str, decision: str, reward: float, cited: list[str], status: str) -> None:
            db.record_outcome(
                name,
                decision_hash=decision,
                reward=reward,
                observer_peer="a",
                hlc=START_MS,
                reason="",
                expires_ms=START_MS,
                cited=cited,
            )
            db.settle_outcome(name, status)

        with db.transaction():
            decide("d1", [h[0], h[1]], START_MS)
            decide("d2", [h[1], h[2]], START_MS)
            decide("old", [h[3]], START_MS - 10 * MINUTE_MS)
            outcome("o1", "d1", 1.0, [h[0]], "converted")  # cited: h0 only
            outcome("o2", "d2", -0.5, [], "converted")  # nothing cited: every chunk in context
            outcome("o3", "d1", 0.25, [h[0]], "converted")  # sums with o1
            outcome("o4", "d2", 1.0, [h[2]], "foreign")  # not converted here: no credit
            outcome("o5", "old", 1.0, [h[3]], "converted")  # its decision is outside the window
        inputs = gather(db, START_MS - MINUTE_MS)
        assert inputs.credit == {r[0]: 1.25, r[1]: -0.5, r[2]: -0.5}
        assert sorted(map(sorted, inputs.contexts)) == [[r[0], r[1]], [r[1], r[2]]]
        # Salience that agrees with the credit correlates positively; against it, negatively.
        agree = learned(inputs, {r[0]: 0.9, r[1]: 0.2, r[2]: 0.1, r[3]: 0.5}, "1m")
        against = learned(inputs, {r[0]: 0.1, r[1]: 0.8, r[2]: 0.9, r[3]: 0.5}, "1m")
        assert agree[1].value is not None and agree[1].value > 0
        assert against[1].value is not None and against[1].value < 0
        # Median of held salience 0.35: of the context chunks r0, r1, r1, r2 only r0 is above.
        assert agree[0].value == pytest.approx(1 / 4)
    finally:
        db.close()


def test_learned_skips_chunks_not_held() -> None:
    inputs = Inputs(contexts=[[1, 2, 99]], credit={1: 1.0, 99: 5.0})
    found = learned(inputs, {1: 0.9, 2: 0.1}, "7d")
    assert found[0].value == pytest.approx(0.5) and found[0].n == 1
    assert found[1].value is None and found[1].n == 1  # one credited chunk held: undefined


def test_disabled_efficacy_records_nothing(tmp_path: Path) -> None:
    config = _config(tmp_path, **{"efficacy.enabled": False})
    rt = Runtime.open(config, clock=ManualClock(START_MS))
    try:
        peer = rt.open_peer()
        try:
            assert maybe_record(peer, START_MS) == {"skipped": "disabled"}
            stats = run_cycle_blocking(peer).stats["promote"]["efficacy"]
        finally:
            peer.close()
        assert stats == {"skipped": "disabled"}
        assert efficacy_rows.efficacy_rows(rt.db) == []
        assert rt.db.get_meta(LAST_EFFICACY_META_KEY) is None
    finally:
        rt.close()
