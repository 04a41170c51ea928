"""What the HNSW index accepts and answers: the labels, vectors and settings it is handed,
checked and converted at its edge, its answers as callers rely on them, and how its error
messages show labels."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from dreamcycle.pulses.vectors import Labels, Vectors
from dreamcycle.store.index_file import VectorIndexError

#: How many labels an error message lists before eliding the rest.
LABELS_SHOWN_IN_ERRORS: Final = 5

Distances = npt.NDArray[np.float32]

#: Range of cosine distance (1 - cosine similarity).
_MIN_DISTANCE: Final = np.float32(0.0)
_MAX_DISTANCE: Final = np.float32(2.0)


class InvalidIndexInput(VectorIndexError, ValueError):
    """Labels, vectors or settings handed to the index are malformed."""


class LabelNotLive(VectorIndexError, LookupError):
    """A label asked for is absent from the index or tombstoned."""


class IndexQueryFailed(VectorIndexError):
    """hnswlib could not answer a k-NN query even with an exhaustive search breadth."""


def preview(labels: Iterable[int]) -> str:
    """The lowest few of `labels`, and how many more there are, for an error message."""
    ordered = sorted(labels)
    shown = ", ".join(str(label) for label in ordered[:LABELS_SHOWN_IN_ERRORS])
    more = len(ordered) - LABELS_SHOWN_IN_ERRORS
    return f"{shown} (+{more} more)" if more > 0 else shown


def check_positive(name: str, value: int, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidIndexInput(f"{name} must be an integer >= {minimum}, got {value!r}")


def as_labels(labels: Any, what: str) -> Labels:
    array = np.asarray(labels)
    if array.ndim != 1:
        raise InvalidIndexInput(f"{what} must be one-dimensional, got shape {array.shape}")
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if not np.issubdtype(array.dtype, np.integer):
        raise InvalidIndexInput(f"{what} must be integers, got dtype {array.dtype}")
    if int(array.min()) < 0:
        raise InvalidIndexInput(f"{what} must be >= 0, got {int(array.min())}")
    return array.astype(np.int64, copy=False)


def as_vectors(vectors: Any, dim: int, what: str) -> Vectors:
    array = np.asarray(vectors)
    if array.ndim != 2 or array.shape[1] != dim:
        raise InvalidIndexInput(f"{what} must have shape (n, {dim}), got {array.shape}")
    if not np.issubdtype(array.dtype, np.floating):
        raise InvalidIndexInput(f"{what} must be floating point, got dtype {array.dtype}")
    if not np.isfinite(array).all():
        raise InvalidIndexInput(f"{what} contain NaN or infinite values")
    return np.ascontiguousarray(array, dtype=np.float32)


def as_labelled(labels: Any, vectors: Any, dim: int) -> tuple[Labels, Vectors]:
    """Labels and their vectors, checked: as many of one as of the other."""
    label_array = as_labels(labels, "labels")
    vector_array = as_vectors(vectors, dim, "vectors")
    if len(label_array) != len(vector_array):
        raise InvalidIndexInput(f"{len(label_array)} labels for {len(vector_array)} vectors")
    return label_array, vector_array


def ordered_answer(raw_labels: Any, raw_distances: Any) -> tuple[Labels, Distances]:
    """hnswlib's answer with each row ordered by (distance, label), so ties come out the
    same on every peer, and distances within [0, 2]."""
    found_labels = np.asarray(raw_labels).astype(np.int64)
    # Rounding gives -2e-7 for a vector and itself; callers rely on d in [0, 2].
    found_distances = np.clip(
        np.asarray(raw_distances, dtype=np.float32), _MIN_DISTANCE, _MAX_DISTANCE
    )
    order = np.lexsort((found_labels, found_distances), axis=-1)
    return (
        np.take_along_axis(found_labels, order, axis=-1),
        np.take_along_axis(found_distances, order, axis=-1),
    )


def empty_answer(rows: int, width: int) -> tuple[Labels, Distances]:
    """An answer of `rows` rows of `width` (0, or no rows) holding nothing."""
    return np.zeros((rows, width), dtype=np.int64), np.zeros((rows, width), dtype=np.float32)


def stacked_answers(answers: list[tuple[Labels, Distances]]) -> tuple[Labels, Distances]:
    """One-row answers as one; if an add widened the later ones, each cut to the narrowest."""
    width = min(labels.shape[1] for labels, _ in answers)
    return (
        np.concatenate([labels[:, :width] for labels, _ in answers]),
        np.concatenate([distances[:, :width] for _, distances in answers]),
    )
