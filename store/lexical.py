"""Recall's lexical side: BM25 over a chunk's own words (recall_fts) and, apart, over the
words of the questions it learned to answer (learned_fts), both Porter-stemmed.

Apart because bm25() divides a row's score by its length over every column of its table:
learned words beside the content would rank a chunk that answered questions lower by its
own words (migration 0019)."""

from __future__ import annotations

import re
from typing import Final

from dreamcycle.store.database import Database

#: A chunk's own words, and the words of the questions it learned to answer: searched as
#: separate lists (daemon/recall/candidates.py), each in the table that holds it.
CONTENT_COLUMN: Final = "content"
LEARNED_COLUMN: Final = "learned"
TABLES: Final = {CONTENT_COLUMN: "recall_fts", LEARNED_COLUMN: "learned_fts"}
#: Words so common that matching them says nothing; dropping them keeps OR queries fast.
STOPWORDS: Final = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "so",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "you",
        "your",
    ]
)
#: Query words kept at most (a pasted document must not become a thousand-term OR).
MAX_QUERY_TERMS: Final = 64
_WORD: Final = re.compile(r"\w+", re.UNICODE)


def match_expression(query: str) -> str:
    """An FTS5 OR query of the query's distinct words, each quoted (no FTS syntax leaks in)."""
    # A dict keeps the words' order; the scan ends at the last term kept, so a query of
    # many distinct words costs no more than its length.
    seen: dict[str, None] = {}
    for word in _WORD.finditer(query.lower()):
        term = word.group()
        if term not in STOPWORDS:
            seen[term] = None
            if len(seen) == MAX_QUERY_TERMS:
                break
    return " OR ".join(f'"{w}"' for w in seen)


def search_lexical(
    db: Database,
    query: str,
    limit: int,
    *,
    cold: bool | None = False,
    column: str = CONTENT_COLUMN,
) -> list[int]:
    """Best BM25 matches first, over a chunk's own words (`content`) or the words of the
    questions it learned (`learned`); live chunks, cold ones when `cold`, both tiers when
    `cold` is None."""
    table = TABLES.get(column)
    if table is None:
        raise ValueError(f"no full-text index of {column!r}: {sorted(TABLES)}")
    expression = match_expression(query)
    if not expression:
        return []
    expression = f"{column} : ({expression})"
    if cold is None:
        # Tombstoned chunks are in neither table (migrations 0011, 0019): both tiers need
        # no row.
        best = (
            f"SELECT rowid AS id, bm25({table}) AS score FROM {table} "
            f"WHERE {table} MATCH ? ORDER BY score, id LIMIT ?"
        )
    else:
        tier = "o.cold_at IS NOT NULL" if cold else "o.cold_at IS NULL"
        best = (
            f"SELECT f.rowid AS id, bm25({table}) AS score FROM {table} f "
            f"JOIN observations o ON o.id = f.rowid WHERE {table} MATCH ? AND {tier} "
            "ORDER BY score, id LIMIT ?"
        )
    found: list[int] = db.fetch_packed(
        "id", f"FROM ({best})", (expression, limit), order_by="score, id"
    )
    return found
