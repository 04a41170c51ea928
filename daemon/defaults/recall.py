"""Recall and what it learns: how many candidates each retriever gives and how they are
ranked, when the cold tier is searched through a graph, the credit outcomes and agent
sessions give, and how often recall's efficacy is measured.
"""

from __future__ import annotations

from typing import Final

from dreamcycle.daemon.defaults.units import DAY_S
from dreamcycle.pulses import credit, ranking
from dreamcycle.pulses import retrieval_keys as keys

RECALL_TOP_K: Final = 5
#: Most chunks one recall may return: an answer is an attribution, and outcomes credit at
#: most a bounded number of chunks per decision.
RECALL_MAX_TOP_K: Final = 100
#: Candidates taken from each retriever (vector, learned keys, full text, cold tier).
#: 100 with a search breadth of 100 returned the exact top 10 in every benchmark query.
RECALL_CANDIDATES: Final = 100
#: A filter matching at most sqrt(this x live chunks) chunks is searched exactly, over
#: those chunks' stored embeddings, rather than through the index. Through the index a
#: filter of m of N chunks whose chunks are scattered visits about k * N / m chunks,
#: each through a callback, and misses some of the nearest; the exact search reads m
#: embeddings and misses none, so the two cost the same where m^2 is proportional to N.
#: A filter whose chunks lie where the query points (a project asked about its own work)
#: is cheap through the index. Chosen with scripts/bench_filtered.py, which times both
#: paths for scattered filters and for whole topics of several sizes: 500 switches (at
#: sqrt(500 x 100,000) = 7,071 matches of 100k chunks) a little below where scattered
#: filters cost the same both ways, since whole topics cost more exactly there, so that
#: neither kind strays far from its faster path.
RECALL_EXACT_FILTER_SCALE: Final = 500.0
#: From this many cold chunks on, recall searches the cold tier through the live index's
#: graph, which keeps cold chunks apart, rather than reading every cold embedding per
#: query (daemon/recall/cold_search.py). The exact search costs in proportion to the cold
#: tier (scripts/bench_recall.py `--cold-share` measures it), and holds the tier's
#: embeddings in memory; below this size it costs less than one k-NN query of the live
#: index of a store of 100k chunks, and a search of the graph for a tier that small a
#: share of it visits many chunks per one it keeps. 0 searches exactly at every size.
RECALL_COLD_GRAPH_FROM: Final = 8_192
#: MiB of stored embeddings kept in memory to rank candidates from (the rest are read from
#: the database per query): every embedding of 174,000 chunks of 384 floats. Beyond that a
#: copy of all of them beside the index's would double a large peer's memory
#: (scripts/bench_scale.py measures both at a million chunks).
RECALL_EMBEDDINGS_HELD_MIB: Final = 256
RECALL_RRF_K: Final = ranking.DEFAULT_RRF_K
RECALL_SALIENCE_BOUND: Final = ranking.DEFAULT_SALIENCE_BOUND
#: Confidence multiplies relevance by at most 1 +- this; 0 (off) by the efficacy
#: benchmark (docs/efficacy.md): its corpora carry no evidence that certainty helps.
RECALL_CONFIDENCE_BOUND: Final = ranking.DEFAULT_CONFIDENCE_BOUND
RECALL_KEY_WEIGHT: Final = ranking.DEFAULT_KEY_WEIGHT
RECALL_COLD_FACTOR: Final = ranking.DEFAULT_COLD_FACTOR
#: A learned key answers only queries at least this close to the question it was learned from.
RECALL_KEY_MIN_SIMILARITY: Final = 0.8
#: Weights of the fused lists: BM25 over content, cosine (chunk or learned key), BM25
#: over the words of usable learned keys.
RECALL_LEXICAL_WEIGHT: Final = ranking.DEFAULT_LEXICAL_WEIGHT
RECALL_VECTOR_WEIGHT: Final = ranking.DEFAULT_VECTOR_WEIGHT
RECALL_LEARNED_WEIGHT: Final = ranking.DEFAULT_LEARNED_WEIGHT

#: Without citations an outcome credits nothing (see pulses/credit.py for why).
LEARNING_CREDIT_RULE: Final = "none"
LEARNING_KEYS: Final = True
#: Whether a learned key's words travel to other peers (its embedding always does).
LEARNING_SHARE_KEY_TEXT: Final = False
LEARNING_MISS_FACTOR: Final = credit.MISS_FACTOR
LEARNING_KEY_HALF_LIFE_S: Final = keys.KEY_HALF_LIFE_S
LEARNING_MAX_KEYS_PER_CHUNK: Final = keys.MAX_KEYS_PER_CHUNK
#: Cited successes teach recall how far to trust vectors against words (pulses.fusion).
LEARNING_FUSION: Final = True
#: Learned keys rank only in the similarity bands where the store's own new questions
#: showed they help (pulses.key_gate); off, every key at least key_min_similarity-close.
LEARNING_KEY_GATE: Final = True
#: Cited successes teach recall a prior over the candidates' sizes (pulses.intrinsic).
LEARNING_INTRINSIC_PRIOR: Final = True
#: Cited successes could teach recall how far a swept chunk falls (pulses.cold_weight),
#: but they are biased witnesses: a cited chunk was rewarded, so it stays live, while new
#: questions' answers were never cited and are swept like anything else. Learned, the
#: weight buried them (docs/efficacy.md); off, recall.cold_factor holds.
LEARNING_COLD_WEIGHT: Final = False
#: Weights of the credit inferred from what agent sessions do (daemon/memory/implicit_credit.py),
#: each the amount one signal credits a chunk with (0: the signal is ignored).
LEARNING_IMPLICIT_SAVED: Final = 0.5
LEARNING_IMPLICIT_SUMMARY: Final = 0.5
LEARNING_IMPLICIT_ASKED_AGAIN: Final = 0.25
LEARNING_IMPLICIT_SESSION: Final = 0.5
#: How long after a recall what its session does still says something about it.
LEARNING_IMPLICIT_WINDOW_S: Final = 3_600.0
#: How far back a result reported for a whole session reaches.
LEARNING_SESSION_WINDOW_S: Final = 86_400.0
#: A recall at least this close to an earlier one of its session asks the same again.
LEARNING_ASKED_AGAIN_SIMILARITY: Final = 0.8

EFFICACY_ENABLED: Final = True
#: Seconds between computations of the efficacy metrics, and the window they look back on.
EFFICACY_INTERVAL_S: Final = 3_600.0
EFFICACY_WINDOW_S: Final = 7 * DAY_S
