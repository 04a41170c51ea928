"""What a hash, or a prefix of one, names: chunks stored or tombstoned here, and decisions
recorded here. Read only: it queries `observations`, `tombstones` and `attributions`.
"""

from __future__ import annotations

from typing import Final

from dreamcycle.store.observations import EFFICACY_TYPE
from dreamcycle.store.queries import TableQueries

#: Hashes a reference may name, by what they are: chunks stored or tombstoned here (not the
#: daemon's own efficacy records), and decisions whose attribution is recorded here. Each
#: selects the hashes within [?1, ?2) (a prefix and the prefix followed by "g": hex digits
#: sort below it, so the range is a seek on the indexed column), at most ?3 of them.
_HASHES_WITH_PREFIX: Final = {
    "chunk": "SELECT content_hash FROM observations WHERE content_hash >= ?1 "
    f"AND content_hash < ?2 AND type != '{EFFICACY_TYPE}' "
    "UNION SELECT hash FROM tombstones WHERE hash >= ?1 AND hash < ?2 ORDER BY 1 LIMIT ?3",
    "decision": "SELECT decision_hash FROM attributions WHERE decision_hash >= ?1 "
    "AND decision_hash < ?2 ORDER BY 1 LIMIT ?3",
}


def hashes_with_prefix(db: TableQueries, what: str, prefix: str, *, limit: int) -> list[str]:
    """The known `what` ("chunk" or "decision") hashes starting with `prefix`, in order, at
    most `limit`; a whole hash finds itself alone, or nothing."""
    return [
        str(r[0]) for r in db.fetch_all(_HASHES_WITH_PREFIX[what], (prefix, prefix + "g", limit))
    ]
