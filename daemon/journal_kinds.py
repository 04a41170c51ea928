"""The kinds of step in the journal, the audit trail of every salience change.

Each step is written in the same transaction as the change it records; `rebuild` replays
the steps in order to re-derive salience and the index, and `explain` shows them.
"""

from __future__ import annotations

import enum


class JournalKind(enum.StrEnum):
    #: A chunk joined the index (admitted here, or adopted from another peer).
    CHUNK = "chunk"
    #: A pulse propagated, with the update rule used.
    PULSE = "pulse"
    #: A chunk was tombstoned for good.
    TOMBSTONE = "tombstone"
    #: A newer version replaced a chunk, which took the old one's salience.
    SUPERSEDE = "supersede"
    #: A chunk's pin floor changed.
    RECONSOLIDATE = "reconsolidate"
    #: Time decay up to an accounted time, with the half-lives and cadence used.
    DOWNSCALE = "downscale"
    #: The percentile sweep moved a chunk to the cold tier.
    SWEEP = "sweep"
    #: A cold chunk came back.
    REVIVE = "revive"
    #: A chunk's confidence changed (reinforce, penalize, verification).
    CONFIDENCE = "confidence"
