"""A chunk's intrinsic worth to the sweep: the information content of its words.

Greetings and acknowledgements share common words and score low; a chunk that names rare
things scores high, whatever its salience (pulses/sweep.py mixes the two).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

from dreamcycle.pulses.vectors import Floats, Labels

_WORD: Final = re.compile(r"[a-z0-9]+")
#: Word numbers information_of_words counts at a time.
WORDS_PER_STEP: Final = 1 << 20


def distinct_words(text: str) -> list[str]:
    """The words information_content weighs, once each, in order."""
    return sorted(set(_WORD.findall(text.lower())))


def information_content(texts: Sequence[str]) -> list[float]:
    """Summed inverse document frequency of each text's distinct words, over `texts`.

    Greetings and acknowledgements share common words and score low; a chunk that
    names rare things scores high, whatever its salience.
    """
    numbering: dict[str, int] = {}
    words = [
        [numbering.setdefault(word, len(numbering)) for word in distinct_words(text)]
        for text in texts
    ]
    word_ids = np.fromiter(itertools.chain.from_iterable(words), dtype=np.int64)
    lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    information: list[float] = information_of_words(word_ids, lengths).tolist()
    return information


def information_of_words(word_ids: npt.ArrayLike, lengths: Labels) -> Floats:
    """information_content of texts given as numbered words: `lengths[i]` distinct word
    numbers of text i, one after another in `word_ids`. A word's weight is
    log((texts + 1) / (texts holding it + 0.5)), counted once.

    Counted WORDS_PER_STEP numbers at a time, a text's words always together: the
    temporary arrays of a large store's words at once raised the sweep's peak memory
    (scripts/bench_scale.py), and each text's sum adds its words in the same order
    either way.
    """
    texts = len(lengths)
    if texts == 0:
        return np.zeros(0, dtype=np.float64)
    ids = np.asarray(word_ids)
    counts = np.asarray(lengths, dtype=np.int64)
    holding = np.zeros(int(ids.max()) + 1 if len(ids) else 0, dtype=np.int64)
    for start in range(0, len(ids), WORDS_PER_STEP):
        holding += np.bincount(ids[start : start + WORDS_PER_STEP], minlength=len(holding))
    weight = np.log((texts + 1) / (holding + 0.5))
    ends = np.cumsum(counts)
    summed = np.zeros(texts, dtype=np.float64)
    first = 0
    while first < texts:
        begin = int(ends[first] - counts[first])
        # The texts whose words end within one step of `begin`; at least one.
        stop = max(first + 1, int(np.searchsorted(ends, begin + WORDS_PER_STEP, side="right")))
        text_of_word = np.repeat(np.arange(stop - first), counts[first:stop])
        summed[first:stop] = np.bincount(
            text_of_word, weights=weight[ids[begin : int(ends[stop - 1])]], minlength=stop - first
        )
        first = stop
    return summed
