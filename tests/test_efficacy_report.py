"""Efficacy metrics against hand-computed values, and the report files they end up in."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from scripts.efficacy_report import (
    Ranking,
    distinct_in_top,
    hit_at,
    latency_summary,
    mrr_at,
    precision_at,
    print_table,
    read_json,
    recall_at,
    retrieval_metrics,
    table_rows,
    write_html,
    write_json,
)

PNG_IMAGE = '<img alt="{}" src="data:image/png;base64,'

#: First evidence at rank 2; two evidence chunks at ranks 1 and 7; a miss. "x" recurs in
#: the third list, so the top-5 lists hold 9 distinct chunks, not 10.
RANKINGS = [
    Ranking("q1", ("a",), ["x", "a", "y"]),
    Ranking("q2", ("b", "c"), ["b", "z", "w", "v", "u", "t", "c"]),
    Ranking("q3", ("d",), ["x", "q"]),
]


def test_recall() -> None:
    assert recall_at(RANKINGS, 5) == pytest.approx(100 * (1 + 0.5 + 0) / 3)
    assert recall_at(RANKINGS, 10) == pytest.approx(100 * (1 + 1 + 0) / 3)
    assert recall_at(RANKINGS, 1) == pytest.approx(100 * (0 + 0.5 + 0) / 3)


def test_mrr() -> None:
    assert mrr_at(RANKINGS, 10) == pytest.approx(100 * (1 / 2 + 1 + 0) / 3)
    assert mrr_at(RANKINGS) == mrr_at(RANKINGS, 10)
    assert mrr_at(RANKINGS, 1) == pytest.approx(100 / 3)


def test_hit_and_precision() -> None:
    assert hit_at(RANKINGS, 5) == pytest.approx(200 / 3)
    assert hit_at(RANKINGS, 1) == pytest.approx(100 / 3)
    assert precision_at(RANKINGS, 5) == pytest.approx(100 * (1 / 5 + 1 / 5 + 0) / 3)
    assert precision_at(RANKINGS, 10) == pytest.approx(100 * (1 / 10 + 2 / 10 + 0) / 3)


def test_distinct_in_top() -> None:
    assert distinct_in_top(RANKINGS, 5) == 9
    assert distinct_in_top(RANKINGS, 1) == 2
    assert distinct_in_top([]) == 0


def test_duplicate_evidence_and_returns_count_once() -> None:
    ranking = Ranking("q", ("a", "a", "b"), ["a", "a", "c"])
    assert recall_at([ranking], 3) == pytest.approx(50.0)


def test_empty_sets_are_missing_not_zero() -> None:
    with pytest.raises(ValueError, match="no rankings"):
        recall_at([], 5)
    with pytest.raises(ValueError, match="k must be"):
        hit_at(RANKINGS, 0)
    assert retrieval_metrics([]) is None
    assert latency_summary([]) is None
    metrics = retrieval_metrics(RANKINGS)
    assert metrics is not None
    assert metrics["recall@5"] == pytest.approx(50.0)
    assert metrics["mrr@10"] == pytest.approx(50.0)
    assert metrics["questions"] == 3


def test_latency_summary() -> None:
    summary = latency_summary([float(v) for v in range(1, 101)])
    assert summary is not None
    assert summary["p50"] == pytest.approx(50.5)
    assert summary["p99"] == pytest.approx(99.01)


# ---- files ----------------------------------------------------------------------------------


def _set_metrics(recall5: float) -> dict[str, float]:
    return {
        "recall@5": recall5,
        "recall@10": recall5 + 10,
        "mrr@10": recall5 - 5,
        "hit@5": recall5 + 5,
    }


RESULTS: dict[str, Any] = {
    "params": {"corpus": "generated-small-seed7", "days": 60, "seed": 7, "sweeps": [10, 20]},
    "configs": [
        {
            "name": "baseline",
            "description": "similarity only, no learning",
            "metrics": {
                "heldout": _set_metrics(41.0),
                "repeated": _set_metrics(42.0),
                "paraphrased": _set_metrics(43.0),
                "swept_fraction": 0.0,
                "heldout_evidence_lost": 0.0,
                "distinct_top5": 311,
                "latency_ms": {"p50": 1.25, "p99": 7.5},
            },
            "curve": [
                {
                    "day": 10,
                    "heldout_recall@5": 40.0,
                    "repeated_recall@5": 40.0,
                    "swept_fraction": 0.0,
                },
                {
                    "day": 20,
                    "heldout_recall@5": 41.0,
                    "repeated_recall@5": 42.0,
                    "swept_fraction": 0.0,
                },
            ],
        },
        {
            "name": "learn+sweep <b>",
            "metrics": {
                "heldout": _set_metrics(47.5),
                "repeated": _set_metrics(71.25),
                "swept_fraction": 0.125,
                "heldout_evidence_lost": 0.03,
                "distinct_top5": 250,
            },
            "curve": [
                {
                    "day": 10,
                    "heldout_recall@5": 44.0,
                    "repeated_recall@5": 60.0,
                    "swept_fraction": 0.05,
                },
                {"day": 20, "heldout_recall@5": 47.5},
            ],
            "salience": {"before": [0.1, 0.2, 0.2, 0.9], "after": [0.2, 0.9]},
        },
        {"name": "bare"},
    ],
}


def test_json_round_trips(tmp_path: Path) -> None:
    path = write_json(tmp_path / "out" / "results.json", RESULTS)
    assert read_json(path) == RESULTS
    assert json.loads(path.read_text(encoding="utf-8")) == RESULTS


def test_json_writes_nan_as_null(tmp_path: Path) -> None:
    path = write_json(tmp_path / "r.json", {"params": {"x": math.nan}, "configs": []})
    assert "NaN" not in path.read_text(encoding="utf-8")
    assert read_json(path)["params"]["x"] is None


def test_table_rows_flatten_and_leave_gaps() -> None:
    rows = table_rows(RESULTS)
    assert [row["name"] for row in rows] == ["baseline", "learn+sweep <b>", "bare"]
    assert rows[1]["heldout recall@5"] == 47.5
    assert rows[1]["repeated mrr@10"] == 66.25
    assert rows[1]["paraphrased recall@5"] is None
    assert rows[1]["swept_fraction"] == pytest.approx(12.5)
    assert rows[1]["latency p50"] is None
    assert rows[0]["latency p99"] == 7.5
    assert all(value is None for key, value in rows[2].items() if key != "name")


def test_print_table(capsys: pytest.CaptureFixture[str]) -> None:
    print_table(table_rows(RESULTS))
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 + 3
    assert "71.2" in lines[3] and "12.5" in lines[3]
    print_table([{"name": "a", "v": 1.5}], ["name", "v"])
    assert capsys.readouterr().out.splitlines()[-1].split() == ["a", "1.50"]


def test_html_report(tmp_path: Path) -> None:
    path = write_html(tmp_path / "report.html", RESULTS)
    page = path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert "generated-small-seed7" in page
    assert "<td>baseline</td>" in page and "<td>bare</td>" in page
    assert "learn+sweep &lt;b&gt;" in page and "<b>" not in page
    assert '<td class="num">71.2</td>' in page
    assert '<td class="num">12.5</td>' in page
    assert "similarity only, no learning" in page
    for title in ("Learning curve", "Salience before and after sweeps", "Swept fraction over days"):
        assert page.count(PNG_IMAGE.format(title)) == 1
    assert 'src="http' not in page


def test_html_report_without_plottable_data(tmp_path: Path) -> None:
    results = {
        "params": {},
        "configs": [{"name": "only", "metrics": {"heldout": _set_metrics(10.0)}}],
    }
    page = write_html(tmp_path / "r.html", results).read_text(encoding="utf-8")
    assert "data:image/png" not in page
    assert "No configuration recorded a learning curve." in page
    assert '<td class="num">10.0</td>' in page
