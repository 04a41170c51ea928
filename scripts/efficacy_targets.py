"""What the efficacy benchmark requires of the defaults (`--assert-targets`).

Each target compares configurations run side by side on the same splits, so what it
checks is what learning adds, never an absolute figure. A target is checked only when
the configurations it compares were run. "Per group" targets hold for every conversation
group, so one group cannot carry the mean; a group may fall short by at most the spread
over seeds (one question is worth several points in a small group).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

#: New questions: the defaults must beat the hybrid by this much on the mean.
NEW_GAIN_OVER_HYBRID: Final = 3.0
#: Repeated questions: the defaults with cited outcomes, over the hybrid.
REPEATED_GAIN_CITED: Final = 15.0
#: Repeated questions: an agent that never reports an outcome (notes, session results).
REPEATED_GAIN_IMPLICIT: Final = 10.0
#: The sweep must sharpen new questions by this much (precision@5 and MRR@10).
SWEEP_SHARPENS_BY: Final = 2.0
#: Share of held-out evidence the sweep may bury.
MAX_EVIDENCE_LOST: Final = 0.01
IMPLICIT_CONFIGS: Final = ("notes", "session")


@dataclass(frozen=True)
class Miss:
    target: str
    detail: str


def _metric(config: Mapping[str, Any], *keys: str) -> float | None:
    value: Any = config.get("metrics", {})
    for key in keys:
        if not isinstance(value, Mapping) or value.get(key) is None:
            return None
        value = value[key]
    return float(value)


def _spread(config: Mapping[str, Any], *keys: str) -> float:
    value: Any = config.get("spread", {})
    for key in keys:
        if not isinstance(value, Mapping) or value.get(key) is None:
            return 0.0
        value = value[key]
    return float(value)


def _groups(config: Mapping[str, Any]) -> list[str]:
    groups = config.get("metrics", {}).get("groups") or {}
    return sorted(groups) if len(groups) > 1 else []


def _at_least(
    target: str,
    mine: Mapping[str, Any],
    other: Mapping[str, Any],
    keys: tuple[str, ...],
    gain: float,
) -> Iterator[Miss]:
    a, b = _metric(mine, *keys), _metric(other, *keys)
    if a is not None and b is not None and a < b + gain:
        yield Miss(
            target, f"{mine['name']} {'/'.join(keys)} {a:.1f} < {other['name']} {b:.1f} + {gain:g}"
        )


def _per_group(
    target: str, mine: Mapping[str, Any], other: Mapping[str, Any], keys: tuple[str, ...]
) -> Iterator[Miss]:
    for group in _groups(mine):
        path = ("groups", group, *keys)
        a, b = _metric(mine, *path), _metric(other, *path)
        if a is None or b is None:
            continue
        slack = max(_spread(mine, *path), _spread(other, *path))
        if a < b - slack:
            yield Miss(
                target,
                f"group {group}: {mine['name']} {'/'.join(keys)} {a:.1f} < "
                f"{other['name']} {b:.1f} - spread {slack:.1f}",
            )


def misses(results: Mapping[str, Any]) -> list[Miss]:
    by_name = {c["name"]: c for c in results.get("configs", [])}
    found: list[Miss] = []
    full, hybrid = by_name.get("full"), by_name.get("hybrid")
    if full is not None and hybrid is not None:
        for keys in (("heldout", "recall@5"), ("heldout", "mrr@10")):
            found += _at_least("new questions", full, hybrid, keys, NEW_GAIN_OVER_HYBRID)
            found += _per_group("new questions per group", full, hybrid, keys)
            if "no-keys" in by_name:
                found += _at_least("new questions", full, by_name["no-keys"], keys, 0.0)
                found += _per_group("new questions per group", full, by_name["no-keys"], keys)
        found += _at_least(
            "repeated questions", full, hybrid, ("repeated", "recall@5"), REPEATED_GAIN_CITED
        )
        for name in IMPLICIT_CONFIGS:
            if name in by_name:
                implicit = by_name[name]
                found += _at_least(
                    "no outcome call",
                    implicit,
                    hybrid,
                    ("repeated", "recall@5"),
                    REPEATED_GAIN_IMPLICIT,
                )
                found += _at_least("no outcome call", implicit, hybrid, ("heldout", "recall@5"), 0)
    if full is not None and "full-nosweep" in by_name:
        nosweep = by_name["full-nosweep"]
        for keys in (("heldout", "precision@5"), ("heldout", "mrr@10")):
            found += _at_least("forgetting sharpens", full, nosweep, keys, SWEEP_SHARPENS_BY)
    if full is not None:
        lost = _metric(full, "heldout_evidence_lost")
        if lost is not None and lost > MAX_EVIDENCE_LOST:
            found.append(
                Miss("forgetting loses nothing", f"full lost {lost:.1%} of held-out evidence")
            )
    return found


def check_targets(results: Mapping[str, Any]) -> int:
    """Print every missed target; 1 if any was missed."""
    found = misses(results)
    for miss in found:
        print(f"target missed ({miss.target}): {miss.detail}", file=sys.stderr)
    return 1 if found else 0
