"""Where learned keys may rank: each similarity band judged on the store's new questions.

A learned key lets a chunk be found by a question it answered before. For that question
asked again, in the same or nearly the same words, it is what memory is for. For a new
question that merely resembles an old one (another person's birthday, another
service's port) it pulls the old answer above the new one's. Which similarity separates
the two depends on the store: how its questions are worded, how many of them share an
answer. So the question's closest key's similarity is cut into bands, and each band is
judged by the store's own cited successes: before a success teaches its keys, its cited
chunks are ranked with the keys the store holds and without them (pulses.evidence).
Recall uses keys of a band only while that band's verdict says they help.

The prior: keys are used for a question at least PRIOR_FROM-similar to the one they were
learned from (asked again, at most reworded), and not below until the store's questions
show they help there. A band reached by no question of the store keeps its prior.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

import numpy as np
import numpy.typing as npt

from dreamcycle.pulses.evidence import InvalidEvidence, PairedGain

#: Lower edges of the bands; the last band runs to 1.
BAND_EDGES: Final = (0.80, 0.85, 0.90, 0.95, 0.98)
#: Bands from this edge on start used: a question this close is the same question.
PRIOR_FROM: Final = 0.95


@dataclass(frozen=True)
class KeyGate:
    """One PairedGain per band of BAND_EDGES."""

    bands: tuple[PairedGain, ...] = tuple(PairedGain() for _ in BAND_EDGES)

    def __post_init__(self) -> None:
        if len(self.bands) != len(BAND_EDGES):
            raise InvalidEvidence(f"expected {len(BAND_EDGES)} key bands, got {len(self.bands)}")

    def observe(self, similarity: float, gain: float) -> KeyGate:
        """The gate after one question whose closest key was `similarity`-close."""
        band = band_of(similarity)
        if band is None:
            return self
        bands = list(self.bands)
        bands[band] = bands[band].add(gain)
        return replace(self, bands=tuple(bands))

    def open_bands(self) -> tuple[bool, ...]:
        """Per band, whether recall uses keys this close to the query."""
        return tuple(
            stats.verdict(prior=edge >= PRIOR_FROM)
            for edge, stats in zip(BAND_EDGES, self.bands, strict=True)
        )

    def to_json(self) -> dict[str, object]:
        return {"edges": list(BAND_EDGES), "bands": [b.to_json() for b in self.bands]}

    @classmethod
    def from_json(cls, value: object) -> KeyGate:
        if not isinstance(value, Mapping) or list(value.get("edges", ())) != list(BAND_EDGES):
            raise InvalidEvidence("key gate stored for other bands")
        bands = value.get("bands")
        if not isinstance(bands, Sequence):
            raise InvalidEvidence(f"key gate bands must be a list, got {bands!r}")
        return cls(tuple(PairedGain.from_json(b) for b in bands))


def band_of(similarity: float) -> int | None:
    """The band of a query-to-key cosine; None below the lowest edge (no key is used)."""
    if not math.isfinite(similarity) or similarity < BAND_EDGES[0]:
        return None
    band = 0
    for position, edge in enumerate(BAND_EDGES):
        if similarity >= edge:
            band = position
    return band


def usable_similarities(
    cosines: npt.NDArray[np.floating], open_bands: Sequence[bool]
) -> npt.NDArray[np.bool_]:
    """Which query-to-key cosines fall in an open band."""
    edges = np.asarray(BAND_EDGES, dtype=np.float64)
    bands = np.searchsorted(edges, np.asarray(cosines, dtype=np.float64), side="right") - 1
    opened = np.asarray(open_bands, dtype=np.bool_)
    inside = bands >= 0
    usable: npt.NDArray[np.bool_] = np.zeros(len(bands), dtype=np.bool_)
    usable[inside] = opened[bands[inside]]
    return usable
