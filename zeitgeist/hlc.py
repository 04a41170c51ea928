"""Hybrid logical clock: physical milliseconds in the high bits, a counter in the low 16.

Zeitgeist keys sort by this value, so a peer's clock must never go backwards and
must never fall below any value it has read from another peer; otherwise a reader
could place one of its segments before entries it had already seen. "Read" means read
and verified: a key only listed, or an object whose seal failed, is not observed, so
that a writer without a trusted key cannot drag the clock ahead (zeitgeist/_log_reader.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Final

#: Bits of the logical counter below the physical milliseconds.
COUNTER_BITS: Final = 16
COUNTER_MASK: Final = (1 << COUNTER_BITS) - 1
#: Width of a printed HLC value.
HLC_BITS: Final = 64
#: Largest HLC accepted: peers store HLCs in SQLite's signed 64-bit INTEGER, so the top
#: bit stays clear (47 bits of milliseconds last until the year 6429).
HLC_MAX: Final = (1 << (HLC_BITS - 1)) - 1
#: Hex digits of a printed HLC (zero-padded so keys sort as numbers).
HLC_HEX_DIGITS: Final = HLC_BITS // 4


class InvalidHlc(ValueError):
    """An HLC value outside 0..2**64-1, or text that is not 16 lowercase hex digits."""


def check_hlc(value: int, what: str = "hlc") -> int:
    """`value` if it is a valid HLC; InvalidHlc naming `what` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidHlc(f"{what} must be an integer, got {type(value).__name__}")
    if not 0 <= value <= HLC_MAX:
        raise InvalidHlc(f"{what} {value} is outside 0..2**{HLC_BITS - 1}-1")
    return value


def format_hlc(value: int) -> str:
    """The 16-hex-digit form used in keys; lexical order equals numeric order."""
    return f"{check_hlc(value):0{HLC_HEX_DIGITS}x}"


def parse_hlc(text: str) -> int:
    """Inverse of format_hlc; rejects anything but exactly 16 lowercase hex digits."""
    if len(text) != HLC_HEX_DIGITS or any(c not in "0123456789abcdef" for c in text):
        raise InvalidHlc(f"expected {HLC_HEX_DIGITS} lowercase hex digits, got {text!r}")
    return int(text, 16)


def hlc_from_ms(physical_ms: int) -> int:
    """The smallest HLC at `physical_ms` (counter 0)."""
    return check_hlc(physical_ms << COUNTER_BITS, "hlc of physical time")


def ms_to_hlc_span(duration_ms: int) -> int:
    """A duration in milliseconds expressed in HLC units, for window arithmetic."""
    return duration_ms << COUNTER_BITS


class HybridLogicalClock:
    """Issues strictly increasing HLC values, never below anything observed.

    Thread-safe: the daemon stamps entries from worker threads. `wall_ms` (milliseconds
    since the epoch) is whatever clock the caller runs on, so tests can simulate time.
    """

    def __init__(self, wall_ms: Callable[[], int], start: int = 0) -> None:
        self._wall_ms = wall_ms
        self._last = check_hlc(start, "start")
        self._lock = threading.Lock()

    @staticmethod
    def physical_ms(value: int) -> int:
        return check_hlc(value) >> COUNTER_BITS

    @staticmethod
    def counter(value: int) -> int:
        return check_hlc(value) & COUNTER_MASK

    @property
    def last(self) -> int:
        """The highest value issued or observed so far."""
        with self._lock:
            return self._last

    def now(self) -> int:
        """A fresh value above every value issued or observed before.

        When the wall clock lags (stepped back, or a remote peer is ahead) the
        counter advances instead; a full counter carries into the physical part,
        which is exactly what +1 does with this bit layout.
        """
        with self._lock:
            wall = hlc_from_ms(self._wall_ms())
            candidate = wall if wall > self._last else self._last + 1
            self._last = check_hlc(candidate, "next hlc")
            return candidate

    def rewind(self, value: int) -> None:
        """Lower the high-water mark to `value` (never raise it): for a peer whose own wall
        clock had run ahead, once nothing it must stay above is that high (the caller's
        judgement; see daemon/cycle/hlc_recovery.py). Later now() values exceed `value`."""
        check_hlc(value, "rewound hlc")
        with self._lock:
            self._last = min(self._last, value)

    def observe(self, remote: int) -> None:
        """Record a value read from another peer (in an object that verified); later
        now() values exceed it."""
        check_hlc(remote, "observed hlc")
        with self._lock:
            if remote > self._last:
                self._last = remote
