"""What `status` reports (daemon/memory/status_report.py): its salience histogram counts the memories
`counts.live` counts, and its counts are integers in the API's JSON answer.

The daemon records its efficacy metrics as chunks of their own (type EFFICACY_TYPE) at its
first cycle: stored, never recalled, not memory. In process, on a real store and embedder.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Final

import pytest

from dreamcycle.daemon.api import edit_models, report_models
from dreamcycle.daemon.api.operations import Operations
from dreamcycle.daemon.cycle import run_cycle_blocking
from dreamcycle.daemon.memory.status_report import status_report
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.store.database import EFFICACY_TYPE
from tests.api_helpers import attached_operations, opened_runtime

NOW_MS: Final = 1_700_000_000_000
MEMORIES: Final = (
    "Deployments go out on Tuesdays after the integration suite passes on staging.",
    "S3 writes are retried with exponential backoff, at most five times.",
    "The coffee machine is descaled every second Friday.",
    "Pin the Redis port in the test configuration, or the integration tests are flaky.",
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Runtime, Operations]]:
    """Memories saved through the API, then one cycle: admitted, and efficacy recorded."""
    with (
        opened_runtime(tmp_path_factory.mktemp("status"), "counted", NOW_MS) as rt,
        attached_operations(rt) as (peer, ops),
    ):
        for content in MEMORIES:
            ops.save(edit_models.SaveRequest(content=content, importance=7))
        run_cycle_blocking(peer)
        yield rt, ops


def test_the_histogram_counts_the_memories_live_counts(
    served: tuple[Runtime, Operations],
) -> None:
    rt, _ = served
    efficacy = rt.db.fetch_one(
        "SELECT count(*) FROM observations WHERE type = ? AND deleted_at IS NULL AND "
        "cold_at IS NULL",
        (EFFICACY_TYPE,),
    )[0]
    assert efficacy > 0, "the first cycle records the efficacy metrics"
    report = status_report(rt.db, rt.peer_id)
    assert report["counts"]["live"] == len(MEMORIES)
    assert sum(b["chunks"] for b in report["salience_histogram"]) == len(MEMORIES)
    # They were all saved alike, and are counted in one bin.
    assert sorted(b["chunks"] for b in report["salience_histogram"])[-1] == len(MEMORIES)


def test_the_apis_answer_counts_in_integers(served: tuple[Runtime, Operations]) -> None:
    _, ops = served
    answer = json.loads(ops.status().model_dump_json())
    histogram = answer["salience_histogram"]
    assert [set(b) for b in histogram] == [{"from", "to", "chunks"}] * len(histogram)
    assert all(type(b["chunks"]) is int for b in histogram), histogram
    assert all(type(n) is int for n in answer["counts"].values()), answer["counts"]
    assert sum(b["chunks"] for b in histogram) == answer["counts"]["live"] == len(MEMORIES)
    assert (histogram[0]["from"], histogram[-1]["to"]) == (0.0, 1.0)
    # The client reads it back as it was sent.
    again = report_models.StatusResponse.model_validate_json(ops.status().model_dump_json())
    assert again.model_dump()["salience_histogram"] == histogram
