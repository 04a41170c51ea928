"""Accounted time: how much time the store has lived through, as the cycles count it.

Decay and the sweep (its interval, the grace period, cold retention) measure time against
this instead of the clock read now, so a wall clock stepped forward by days cannot decay,
sweep or expire days' worth in one cycle: each cycle moves accounted time towards the clock
by at most `clock.max_step_s` (pulses.decay.accounted_step), and never back. A clock
stepped back leaves it where it was until the clock passes it again; a real downtime is
caught up one bounded step per cycle.

Kept in the meta table, so a restart resumes from it.
"""

from __future__ import annotations

from typing import Final

from dreamcycle.pulses.decay import accounted_step
from dreamcycle.store.database import Database

#: meta key holding the accounted time (milliseconds since the Unix epoch).
ACCOUNTED_META_KEY: Final = "accounted_ms"


def max_step_ms(max_step_s: float) -> int:
    return round(max_step_s * 1000)


def stored(db: Database) -> int | None:
    """The accounted time recorded by the last cycle, if any."""
    value = db.get_meta(ACCOUNTED_META_KEY)
    return None if value is None else int(value)


def advance(db: Database, observed_ms: int, max_step_s: float) -> int:
    """Move accounted time towards `observed_ms` (the clock now) by one bounded step; the
    value a cycle then measures its decay and sweep against. Call inside a transaction."""
    value = accounted_step(stored(db), observed_ms, max_step_ms(max_step_s))
    db.set_meta(ACCOUNTED_META_KEY, str(value))
    return value
