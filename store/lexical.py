"""Recall's lexical side: BM25 over recall_fts (Porter-stemmed content and learned words)."""

from __future__ import annotations

import re
from typing import Final

from store.database import Database

#: BM25 weight of a chunk's own words and of the words of the questions it learned.
CONTENT_WEIGHT: Final = 1.0
LEARNED_WEIGHT: Final = 1.0
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
    seen: list[str] = []
    for word in _WORD.findall(query.lower()):
        if word in STOPWORDS or word in seen:
            continue
        seen.append(word)
    return " OR ".join(f'"{w}"' for w in seen[:MAX_QUERY_TERMS])


def search_lexical(
    db: Database,
    query: str,
    limit: int,
    *,
    cold: bool | None = False,
    learned_weight: float = LEARNED_WEIGHT,
) -> list[int]:
    """Best BM25 matches first: live chunks, cold ones when `cold`, both when None."""
    expression = match_expression(query)
    if not expression:
        return []
    tier = {None: "1", True: "o.cold_at IS NOT NULL", False: "o.cold_at IS NULL"}[cold]
    rows = db.fetch_all(
        "SELECT f.rowid FROM recall_fts f JOIN observations o ON o.id = f.rowid "
        f"WHERE recall_fts MATCH ? AND o.deleted_at IS NULL AND {tier} "
        "ORDER BY bm25(recall_fts, ?, ?), f.rowid LIMIT ?",
        (expression, CONTENT_WEIGHT, learned_weight, limit),
    )
    return [int(r[0]) for r in rows]
