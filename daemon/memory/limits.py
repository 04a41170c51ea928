"""What a memory must satisfy before it is stored, so that every peer can take it.

A stored chunk is published in the next cycle as an `assert` entry (and its revisions as
`reconsolidate` entries), whose fields have protocol limits (zeitgeist/_entry_wire.py). A
chunk stored beyond them can never be published: the cycle that tries fails, and so does
every later one. Each writer (ingest, the API's save, the engram import) checks here first,
and refuses the memory naming the field and the limit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from dreamcycle.store.database import InvalidObservation, NewObservation
from dreamcycle.zeitgeist.entries import CONTENT_MAX_CHARS, LABEL_MAX_CHARS, TITLE_MAX_CHARS

#: The longest text each field of a memory may hold, in characters.
FIELD_MAX_CHARS: Final[Mapping[str, int]] = MappingProxyType(
    {
        "content": CONTENT_MAX_CHARS,
        "title": TITLE_MAX_CHARS,
        "type": LABEL_MAX_CHARS,
        "kind": LABEL_MAX_CHARS,
        "project": LABEL_MAX_CHARS,
        "scope": LABEL_MAX_CHARS,
        "topic_key": LABEL_MAX_CHARS,
        "session_id": LABEL_MAX_CHARS,
        "tool_name": LABEL_MAX_CHARS,
    }
)
#: Fields an `assert` entry requires to be non-empty.
REQUIRED_LABELS: Final = ("type", "kind")


class FieldOverLimit(InvalidObservation):
    """A field longer than the protocol lets any peer publish; the message names it."""


def check_fields(values: Mapping[str, object]) -> None:
    """Refuse (InvalidObservation) a text field in `values` that no peer could publish:
    longer than its limit (FieldOverLimit), a required label left empty, or text that is
    not valid Unicode (a lone surrogate, which UTF-8 cannot encode). Fields not listed in
    FIELD_MAX_CHARS are checked for encoding only; values that are not text are skipped."""
    for name, value in values.items():
        if not isinstance(value, str):
            continue
        limit = FIELD_MAX_CHARS.get(name)
        if limit is not None and len(value) > limit:
            raise FieldOverLimit(
                f"field {name!r}: {len(value)} characters, more than the limit of {limit}"
            )
        if name in REQUIRED_LABELS and not value:
            raise InvalidObservation(f"field {name!r} must not be empty")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidObservation(
                f"field {name!r} is not valid Unicode text: a lone surrogate "
                f"{value[exc.start]!r} at character {exc.start}"
            ) from None


def check_observation_limits(item: NewObservation) -> None:
    """Refuse (InvalidObservation, FieldOverLimit for a length) a memory that could be
    stored but never published; see `check_fields`."""
    check_fields({f.name: getattr(item, f.name) for f in dataclasses.fields(item)})
