"""Embeddings for the efficacy benchmark: the real model, asked once per distinct text.

Every configuration and every seed of a run ranks the same texts, and most runs repeat the
texts of earlier ones, so vectors are kept in memory for the run and, with a cache file,
between runs. The file is keyed by the model's index version: vectors of another model are
never mixed in.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt

#: Texts embedded per call of the model (its batched rate is reached well before this).
WARM_BATCH: Final = 256


def text_key(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


class CachedEmbedder:
    """The real embedder behind a cache; it loads the model only for a text it lacks."""

    def __init__(
        self,
        load: Callable[[], object],
        *,
        model_id: str,
        dim: int,
        index_version: str,
        cache_file: Path | None = None,
    ) -> None:
        self._load = load
        self._inner: object | None = None
        self._cache: dict[str, npt.NDArray[np.float32]] = {}
        self._unsaved = 0
        self.model_id = model_id
        self.dim = dim
        self.index_version = index_version
        self.cache_file = cache_file
        if cache_file is not None and cache_file.exists():
            self._read(cache_file)

    def _read(self, path: Path) -> None:
        with np.load(path, allow_pickle=False) as stored:
            if str(stored["index_version"]) != self.index_version:
                return
            keys, vectors = stored["keys"], stored["vectors"]
            self._cache.update(zip(keys.tolist(), vectors.astype(np.float32), strict=True))

    def save(self) -> None:
        """Write the cache file, when there is one and something new was embedded."""
        if self.cache_file is None or not self._unsaved:
            return
        self.cache_file.parent.mkdir(parents=True, exist_ok=True)
        keys = sorted(self._cache)
        partial = self.cache_file.with_suffix(".partial.npz")
        np.savez(
            partial,
            index_version=np.array(self.index_version),
            keys=np.array(keys),
            vectors=np.stack([self._cache[k] for k in keys]).astype(np.float32),
        )
        partial.replace(self.cache_file)
        self._unsaved = 0

    def warm(self, texts: Sequence[str]) -> None:
        missing = sorted({k: t for t in texts if (k := text_key(t)) not in self._cache}.items())
        if not missing:
            return
        if self._inner is None:
            self._inner = self._load()
        embed = self._inner.embed  # type: ignore[attr-defined]
        for start in range(0, len(missing), WARM_BATCH):
            batch = missing[start : start + WARM_BATCH]
            vectors = embed([text for _, text in batch])
            self._cache.update(zip((key for key, _ in batch), vectors, strict=True))
        self._unsaved += len(missing)

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.warm(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        stacked: npt.NDArray[np.float32] = np.stack([self._cache[text_key(t)] for t in texts])
        return stacked

    def embed_one(self, text: str) -> npt.NDArray[np.float32]:
        one: npt.NDArray[np.float32] = self.embed([text])[0]
        return one
