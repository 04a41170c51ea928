"""Retrieval metrics for the efficacy benchmark, and the JSON and HTML it writes.

The benchmark compares configurations (plain retrieval, outcome learning, sweeps...) on
three question sets: held-out questions (never trained on: does learning generalise?),
repeated training questions (does it remember what helped?) and paraphrases of training
questions (does it carry over to new wording?). The report has to make that comparison
at a glance, and stay readable when a configuration lacks a part (no sweeps, no curve).

The `results` dict, as written to JSON and read back for the HTML::

    {
      "params": {str: any JSON value},          # the run's parameters, shown verbatim
      "configs": [
        {
          "name": str,
          "description": str,                   # optional
          "metrics": {                          # every key optional
            "heldout":     {"recall@5": float, "recall@10": float, "mrr@10": float,
                            "hit@5": float, ...},   # percentages, 0-100
            "repeated":    {...same keys...},
            "paraphrased": {...same keys...},
            "swept_fraction": float,            # share of all chunks swept, 0-1
            "heldout_evidence_lost": float,     # share of held-out evidence swept, 0-1
            "distinct_top5": int,               # distinct chunks across all top-5 lists
            "latency_ms": {"p50": float, "p99": float}
          },
          "curve": [                            # optional; one point per evaluated day
            {"day": int, "heldout_recall@5": float, "repeated_recall@5": float,
             "swept_fraction": float}           # each value optional
          ],
          "salience": {"before": [float], "after": [float]}   # optional
        }
      ]
    }

Percentages are what people compare across papers; fractions stay fractions where they
describe the store rather than a question set. A missing value is shown as "-".

One module: the metrics, the JSON, the console table, the plots and the HTML all read and
write the one `results` layout described above.
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import json
import math
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from scripts import bench_common
from scripts.bench_common import Column

PERCENT: Final = 100.0
DEFAULT_K: Final = 10
TOP_K_SMALL: Final = 5
QUESTION_SETS: Final = ("heldout", "repeated", "paraphrased")
QUESTION_SET_TITLES: Final = {
    "heldout": "held-out",
    "repeated": "repeated",
    "paraphrased": "paraphrased",
}
SET_METRICS: Final = ("recall@5", "recall@10", "mrr@10", "hit@5")
LATENCY_PERCENTILES: Final = {"p50": 50.0, "p99": 99.0}
MISSING: Final = "-"

FIGURE_SIZE: Final = (8.0, 4.0)
SUBPLOT_SIZE: Final = (4.0, 3.0)
SUBPLOT_COLUMNS: Final = 3
FIGURE_DPI: Final = 100
HISTOGRAM_BINS: Final = 30
#: Points are marked so a curve with a single evaluated day still shows.
CURVE_MARKER: Final = "."


# ---- metrics --------------------------------------------------------------------------------


@dataclass
class Ranking:
    """What recall returned for one question, best first, and what it should have found."""

    qid: str
    evidence: tuple[str, ...]
    returned: list[str] = field(default_factory=list)

    def first_hit(self, k: int) -> int | None:
        """1-based rank of the first evidence chunk within the top `k`, if any."""
        wanted = set(self.evidence)
        for rank, chunk in enumerate(self.returned[:k], start=1):
            if chunk in wanted:
                return rank
        return None

    def found(self, k: int) -> int:
        return len(set(self.evidence) & set(self.returned[:k]))


def _mean_percent(rankings: Sequence[Ranking], score: Callable[[Ranking], float]) -> float:
    """The mean of a per-question score, as a percentage.

    An empty question set has no score, and 0 would read as "retrieval failed", so it is
    refused; `retrieval_metrics` turns an empty set into a missing entry instead.
    """
    if not rankings:
        raise ValueError("no rankings to score")
    return PERCENT * sum(score(r) for r in rankings) / len(rankings)


def _check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be at least 1, not {k}")


def recall_at(rankings: Sequence[Ranking], k: int) -> float:
    """Share of each question's evidence found in its top `k`, averaged over questions."""
    _check_k(k)
    return _mean_percent(rankings, lambda r: r.found(k) / len(set(r.evidence)))


def precision_at(rankings: Sequence[Ranking], k: int) -> float:
    """Share of the top `k` slots holding evidence; a short list still counts `k` slots,
    since the slots it left empty were not filled with anything useful either."""
    _check_k(k)
    return _mean_percent(rankings, lambda r: r.found(k) / k)


def hit_at(rankings: Sequence[Ranking], k: int) -> float:
    """Share of questions with any evidence in the top `k`: an agent reading the top `k`
    can answer those."""
    _check_k(k)
    return _mean_percent(rankings, lambda r: 0.0 if r.first_hit(k) is None else 1.0)


def mrr_at(rankings: Sequence[Ranking], k: int = DEFAULT_K) -> float:
    """Mean reciprocal rank of the first evidence chunk, counting misses beyond `k` as 0."""
    _check_k(k)

    def reciprocal(r: Ranking) -> float:
        rank = r.first_hit(k)
        return 0.0 if rank is None else 1.0 / rank

    return _mean_percent(rankings, reciprocal)


def distinct_in_top(rankings: Iterable[Ranking], k: int = TOP_K_SMALL) -> int:
    """How many different chunks appear across all top-`k` lists.

    Learning that rewards a few popular chunks shows up here as a shrinking number: the
    same chunks returned whatever is asked.
    """
    _check_k(k)
    return len({chunk for r in rankings for chunk in r.returned[:k]})


def retrieval_metrics(rankings: Sequence[Ranking]) -> dict[str, float] | None:
    """The metrics of one question set for `results`, or None when the set is empty."""
    if not rankings:
        return None
    return {
        "recall@5": recall_at(rankings, 5),
        "recall@10": recall_at(rankings, 10),
        "mrr@10": mrr_at(rankings, 10),
        "hit@5": hit_at(rankings, 5),
        "precision@5": precision_at(rankings, 5),
        "questions": float(len(rankings)),
    }


def latency_summary(samples_ms: Sequence[float]) -> dict[str, float] | None:
    """p50 and p99 of recall latencies (linear interpolation), or None without samples."""
    if not samples_ms:
        return None
    values = np.asarray(samples_ms, dtype=np.float64)
    return {name: float(np.percentile(values, q)) for name, q in LATENCY_PERCENTILES.items()}


# ---- JSON and the console -------------------------------------------------------------------


def _json_safe(value: Any) -> Any:
    """NaN and infinities become null: standard JSON has no spelling for them."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def write_json(path: Path, results: Mapping[str, Any]) -> Path:
    return bench_common.write_json(path, _json_safe(results))


def read_json(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object of results")
    return data


def _lookup(config: Mapping[str, Any], *keys: str) -> Any:
    """A nested value of a config, or None wherever the path breaks off."""
    value: Any = config
    for key in keys:
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return value


# ---- several seeds --------------------------------------------------------------------------


def _numbers_of(values: Sequence[Any]) -> Any:
    """The mean of a leaf over seeds, recursing into mappings (keys every seed has)."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    if all(isinstance(v, Mapping) for v in present):
        keys = set.intersection(*(set(v) for v in present))
        return {k: _numbers_of([v[k] for v in present]) for k in sorted(keys)}
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        return float(np.mean(present))
    return present[0]


def _spread_of(values: Sequence[Any]) -> Any:
    """The sample standard deviation of a leaf over seeds (0 for one seed), like _numbers_of."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    if all(isinstance(v, Mapping) for v in present):
        keys = set.intersection(*(set(v) for v in present))
        spread = {k: _spread_of([v[k] for v in present]) for k in sorted(keys)}
        return {k: v for k, v in spread.items() if v is not None}
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        return float(np.std(present, ddof=1)) if len(present) > 1 else 0.0
    return None


def _mean_curve(curves: Sequence[Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Curve points averaged day by day over the seeds that have that day."""
    by_day: dict[int, list[Mapping[str, Any]]] = {}
    for curve in curves:
        for point in curve:
            by_day.setdefault(int(point["day"]), []).append(point)
    return [
        {"day": day, **{k: v for k, v in (_numbers_of(points) or {}).items() if k != "day"}}
        for day, points in sorted(by_day.items())
        if len(points) == len(curves)
    ]


def aggregate_seeds(seeds: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One config per name over every seed: `metrics` the means, `spread` the deviations.

    `seeds` is `[{"seed": int, "configs": [config, ...]}, ...]`; the salience
    histograms are the first seed's (a distribution, not a figure to average).
    """
    names: list[str] = []
    runs: dict[str, list[Mapping[str, Any]]] = {}
    for seed in seeds:
        for config in seed["configs"]:
            if config["name"] not in runs:
                names.append(config["name"])
            runs.setdefault(config["name"], []).append(config)
    return [
        {
            "name": name,
            "description": runs[name][0].get("description", ""),
            "seeds": len(runs[name]),
            "metrics": _numbers_of([c.get("metrics") for c in runs[name]]) or {},
            "spread": _spread_of([c.get("metrics") for c in runs[name]]) or {},
            "curve": _mean_curve([c.get("curve") or [] for c in runs[name]]),
            "salience": runs[name][0].get("salience", {}),
        }
        for name in names
    ]


def _with_spread(config: Mapping[str, Any], *keys: str) -> Any:
    """The value, or "mean ±spread" as text when the config was run on several seeds."""
    value = _lookup(config, "metrics", *keys)
    spread = _lookup(config, "spread", *keys)
    if value is None or not spread or int(config.get("seeds", 1)) < 2:
        return value
    return f"{value:.1f} ±{spread:.1f}"


GROUP_METRICS: Final = (("heldout", "recall@5"), ("heldout", "mrr@10"), ("repeated", "recall@5"))


def group_rows(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per (group, configuration): the figures no single group may lose."""
    rows: list[dict[str, Any]] = []
    configs = list(results.get("configs", []))
    groups = sorted({g for c in configs for g in (_lookup(c, "metrics", "groups") or {})})
    if len(groups) < 2:
        return rows
    for group in groups:
        for config in configs:
            row: dict[str, Any] = {"group": group, "name": config.get("name", "?")}
            for question_set, metric in GROUP_METRICS:
                row[f"{question_set} {metric}"] = _with_spread(
                    config, "groups", group, question_set, metric
                )
            rows.append(row)
    return rows


GROUP_COLUMNS: Final = (
    Column("group", "group"),
    Column("name", "configuration"),
    *(Column(f"{s} {m}", f"{QUESTION_SET_TITLES[s]} {m}", ".1f") for s, m in GROUP_METRICS),
)


def print_groups(results: Mapping[str, Any]) -> None:
    rows = group_rows(results)
    if rows:
        print(bench_common.format_table(rows, list(GROUP_COLUMNS)))


def table_rows(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One flat row per configuration: the shape both the console and the HTML show."""
    rows: list[dict[str, Any]] = []
    for config in results.get("configs", []):
        row: dict[str, Any] = {"name": config.get("name", "?")}
        for question_set in QUESTION_SETS:
            for metric in SET_METRICS:
                row[f"{question_set} {metric}"] = _with_spread(config, question_set, metric)
        for fraction in ("swept_fraction", "heldout_evidence_lost"):
            value = _lookup(config, "metrics", fraction)
            row[fraction] = None if value is None else PERCENT * value
        row["distinct_top5"] = _lookup(config, "metrics", "distinct_top5")
        row["vector_share"] = _lookup(config, "metrics", "vector_share")
        for name in LATENCY_PERCENTILES:
            row[f"latency {name}"] = _lookup(config, "metrics", "latency_ms", name)
        rows.append(row)
    return rows


#: The main table, in the order of `table_rows`. Percentages carry one decimal.
TABLE_COLUMNS: Final = (
    Column("name", "configuration"),
    *(
        Column(f"{s} {m}", f"{QUESTION_SET_TITLES[s]} {m}", ".1f")
        for s in QUESTION_SETS
        for m in SET_METRICS
    ),
    Column("swept_fraction", "swept %", ".1f"),
    Column("heldout_evidence_lost", "held-out evidence lost %", ".1f"),
    Column("distinct_top5", "distinct in top-5", ",.0f"),
    Column("vector_share", "vector share", ".2f"),
    Column("latency p50", "recall p50 ms", ".2f"),
    Column("latency p99", "recall p99 ms", ".2f"),
)


def print_table(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[Column | str] = TABLE_COLUMNS
) -> None:
    """An aligned console table; a column given as a bare key shows numbers with 2 decimals."""
    print(bench_common.format_table(rows, [_column(c) for c in columns]))


def _column(column: Column | str) -> Column:
    return column if isinstance(column, Column) else Column(column, number_format=",.2f")


# ---- plots ----------------------------------------------------------------------------------


def _png(figure: Figure) -> str:
    """A figure as base64 PNG, drawn with Agg: no display and no pyplot global state."""
    buffer = io.BytesIO()
    FigureCanvasAgg(figure).print_png(buffer)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _curve(config: Mapping[str, Any], key: str) -> tuple[list[float], list[float]]:
    """The (day, value) points of one curve series, skipping points that lack it."""
    points = [
        (float(p["day"]), float(p[key]))
        for p in config.get("curve") or []
        if isinstance(p, Mapping) and p.get("day") is not None and p.get(key) is not None
    ]
    return [d for d, _ in points], [v for _, v in points]


def _colours(count: int) -> list[Any]:
    palette = colormaps["tab10"]
    return [palette(i % palette.N) for i in range(count)]


def _plot_curves(
    results: Mapping[str, Any],
    series: Sequence[tuple[str, str, str, float]],
    ylabel: str,
    title: str,
) -> str | None:
    """One line per configuration and series (curve key, line style, label, scale)."""
    configs = list(results.get("configs", []))
    figure = Figure(figsize=FIGURE_SIZE, dpi=FIGURE_DPI)
    axes = figure.add_subplot()
    drawn = False
    for config, colour in zip(configs, _colours(len(configs)), strict=True):
        for key, style, label, scale in series:
            days, values = _curve(config, key)
            if days:
                axes.plot(
                    days,
                    [scale * v for v in values],
                    style,
                    marker=CURVE_MARKER,
                    color=colour,
                    label=f"{config['name']} {label}".strip(),
                )
                drawn = True
    if not drawn:
        return None
    _finish(axes, "simulated day", ylabel, title)
    figure.tight_layout()
    return _png(figure)


def plot_learning_curve(results: Mapping[str, Any]) -> str | None:
    """Held-out and repeated recall@5 by day: learning should lift the repeated line
    without dropping the held-out one."""
    return _plot_curves(
        results,
        [
            ("heldout_recall@5", "-", "held-out", 1.0),
            ("repeated_recall@5", "--", "repeated", 1.0),
        ],
        "recall@5 (%)",
        "Learning curve",
    )


def plot_swept_fraction(results: Mapping[str, Any]) -> str | None:
    """How much of the store sweeps have moved to the cold tier by each day."""
    return _plot_curves(
        results, [("swept_fraction", "-", "", PERCENT)], "chunks swept (%)", "Swept fraction"
    )


def plot_salience(results: Mapping[str, Any]) -> str | None:
    """Salience histograms before and after sweeps, one panel per configuration: a sweep
    should cut the low tail and leave the rest in place."""
    panels = [
        config
        for config in results.get("configs", [])
        if _lookup(config, "salience", "before") or _lookup(config, "salience", "after")
    ]
    if not panels:
        return None
    columns = min(SUBPLOT_COLUMNS, len(panels))
    rows = math.ceil(len(panels) / columns)
    figure = Figure(figsize=(SUBPLOT_SIZE[0] * columns, SUBPLOT_SIZE[1] * rows), dpi=FIGURE_DPI)
    for index, config in enumerate(panels, start=1):
        axes = figure.add_subplot(rows, columns, index)
        series = {key: _lookup(config, "salience", key) or [] for key in ("before", "after")}
        # Shared bin edges, or the two histograms' bars could not be compared.
        edges = np.histogram_bin_edges(series["before"] + series["after"], HISTOGRAM_BINS).tolist()
        for (key, values), alpha in zip(series.items(), (0.5, 0.7), strict=True):
            if values:
                axes.hist(values, bins=edges, alpha=alpha, label=f"{key} ({len(values)})")
        _finish(axes, "salience", "chunks", str(config["name"]))
    figure.tight_layout()
    return _png(figure)


def _finish(axes: Axes, xlabel: str, ylabel: str, title: str) -> None:
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")


# ---- HTML -----------------------------------------------------------------------------------

_STYLE: Final = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f3f3f3; }
pre { margin: 0; white-space: pre-wrap; }
img { max-width: 100%; }
.missing { color: #888; font-style: italic; }
"""

PLOTS: Final = (
    ("Learning curve", plot_learning_curve, "No configuration recorded a learning curve."),
    ("Salience before and after sweeps", plot_salience, "No configuration recorded salience."),
    ("Swept fraction over days", plot_swept_fraction, "No configuration recorded sweeps by day."),
)


def _cell(value: Any, column: Column) -> str:
    if value is None:
        return f'<td class="num">{MISSING}</td>'
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f'<td class="num">{format(value, column.number_format)}</td>'
    return f"<td>{html.escape(str(value))}</td>"


def _params_html(params: Mapping[str, Any]) -> str:
    if not params:
        return '<p class="missing">No parameters recorded.</p>'
    rows = "".join(
        f"<tr><th>{html.escape(str(key))}</th><td><pre>"
        f"{html.escape(value if isinstance(value, str) else json.dumps(value, indent=1))}"
        f"</pre></td></tr>"
        for key, value in params.items()
    )
    return f"<table>{rows}</table>"


def _main_table_html(results: Mapping[str, Any]) -> str:
    rows = table_rows(results)
    if not rows:
        return '<p class="missing">No configurations.</p>'
    head = "".join(f"<th>{html.escape(column.title)}</th>" for column in TABLE_COLUMNS)
    body = "".join(
        "<tr>" + "".join(_cell(row.get(c.key), c) for c in TABLE_COLUMNS) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _descriptions_html(results: Mapping[str, Any]) -> str:
    items = "".join(
        f"<dt>{html.escape(str(c.get('name', '?')))}</dt>"
        f"<dd>{html.escape(str(c.get('description', '')))}</dd>"
        for c in results.get("configs", [])
        if c.get("description")
    )
    return f"<dl>{items}</dl>" if items else ""


def render_html(results: Mapping[str, Any]) -> str:
    """The whole report as one self-contained page (plots inline), to mail or archive."""
    params = results.get("params") or {}
    title = f"dreamcycle efficacy: {params.get('corpus', 'benchmark')}"
    sections = [
        f"<h1>{html.escape(str(title))}</h1>",
        "<h2>Parameters</h2>",
        _params_html(params),
        "<h2>Results</h2>",
        "<p>Recall, MRR and hit rates are percentages of questions; held-out questions were "
        "never trained on, repeated ones were, paraphrased ones reword training questions.</p>",
        _main_table_html(results),
        _descriptions_html(results),
    ]
    for heading, plot, absent in PLOTS:
        image = plot(results)
        sections.append(f"<h2>{html.escape(heading)}</h2>")
        sections.append(
            f'<img alt="{html.escape(heading)}" src="data:image/png;base64,{image}">'
            if image
            else f'<p class="missing">{html.escape(absent)}</p>'
        )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(str(title))}</title><style>{_STYLE}</style></head><body>\n"
        + "\n".join(sections)
        + "\n</body></html>\n"
    )


def write_html(path: Path, results: Mapping[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(results), encoding="utf-8")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Re-render the HTML from a saved results JSON, e.g. after changing the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("results", type=Path, help="results JSON written by the benchmark")
    parser.add_argument("html", type=Path, help="HTML file to write")
    args = parser.parse_args(argv)
    results = read_json(args.results)
    print_table(table_rows(results))
    write_html(args.html, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
