"""Recall's lexical side: BM25 over recall_fts (Porter-stemmed content and learned words)."""

from __future__ import annotations

import re
from typing import Final

from dreamcycle.store.database import Database

#: The columns of recall_fts: a chunk's own words, and the words of the questions it
#: learned to answer (searched as separate lists, see daemon/recall/retrieve.py).
CONTENT_COLUMN: Final = "content"
LEARNED_COLUMN: Final = "learned"
COLUMNS: Final = (CONTENT_COLUMN, LEARNED_COLUMN)
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
    column: str | None = CONTENT_COLUMN,
) -> list[int]:
    """Best BM25 matches first, over one column (a chunk's own words, or the words of
    the questions it learned) or both (None); live chunks, cold ones when `cold`, both
    tiers when `cold` is None."""
    expression = match_expression(query)
    if not expression:
        return []
    if column is not None:
        if column not in COLUMNS:
            raise ValueError(f"recall_fts has no column {column!r}")
        expression = f"{column} : ({expression})"
    if cold is None:
        # Tombstoned chunks are not in recall_fts (migration 0011): both tiers need no row.
        best = (
            "SELECT rowid AS id, bm25(recall_fts) AS score FROM recall_fts "
            "WHERE recall_fts MATCH ? ORDER BY score, id LIMIT ?"
        )
    else:
        tier = "o.cold_at IS NOT NULL" if cold else "o.cold_at IS NULL"
        best = (
            "SELECT f.rowid AS id, bm25(recall_fts) AS score FROM recall_fts f "
            f"JOIN observations o ON o.id = f.rowid WHERE recall_fts MATCH ? AND {tier} "
            "ORDER BY score, id LIMIT ?"
        )
    found: list[int] = db.fetch_packed(
        "id", f"FROM ({best})", (expression, limit), order_by="score, id"
    )
    return found
