"""Timestamps as stored: ISO 8601 UTC text with milliseconds (engram's convention)."""

from __future__ import annotations

from datetime import UTC, datetime


def iso_from_ms(ms: int) -> str:
    return (
        datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.")
        + f"{ms % 1000:03d}Z"
    )


def ms_from_iso(text: str) -> int:
    """Accepts what iso_from_ms writes and engram's variants ('...Z', '+00:00', no fraction, space)."""
    value = text.strip().replace(" ", "T")
    if value.endswith("Z"):
        value = value[:-1] + "+00:00"
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return round(parsed.timestamp() * 1000)


def ms_in_sql(column: str) -> str:
    """SQL giving a stored timestamp `column` in ms as ms_from_iso does, or NULL where
    SQLite cannot read it (then ms_from_iso must): read in SQL, a million dates cost no
    Python objects."""
    return f"CAST(round(unixepoch({column}, 'subsec') * 1000) AS INTEGER)"
