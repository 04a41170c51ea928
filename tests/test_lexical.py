"""A query's words as a full-text search (store/lexical.py): its first distinct words, each
quoted, read no further than the last one kept."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from dreamcycle.store import lexical
from dreamcycle.store.lexical import MAX_QUERY_TERMS, match_expression


def test_distinct_words_in_order_without_stopwords_each_quoted() -> None:
    assert match_expression('The ferry, the FERRY and "winter" OR NEAR(x)') == (
        '"ferry" OR "winter" OR "near" OR "x"'
    )
    assert match_expression("the and of") == ""


class CountingWords:
    """The word pattern, counting the words a caller takes from it."""

    def __init__(self) -> None:
        self.taken = 0

    def finditer(self, text: str) -> Iterator[re.Match[str]]:
        for match in re.finditer(r"\w+", text):
            self.taken += 1
            yield match


def test_a_query_of_many_distinct_words_is_read_up_to_its_last_kept_term(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A request may carry 100,000 characters: tens of thousands of distinct words, each
    # once compared with every word kept so far, took a worker for over a minute.
    words = [f"w{i}" for i in range(20_000)]
    query = " ".join(["w0", "w0", "the", *words])
    counting = CountingWords()
    monkeypatch.setattr(lexical, "_WORD", counting)
    expression = match_expression(query)
    assert expression == " OR ".join(f'"{w}"' for w in words[:MAX_QUERY_TERMS])
    assert counting.taken == MAX_QUERY_TERMS + 3  # the repeat and the stopword included
