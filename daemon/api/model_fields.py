"""What every request and answer of the API is built from (pydantic v2): the number
types that refuse a boolean, the ways a hash is referred to, the limits every surface
shares, `Strict`, the base of every request, and `RefRequest`, the one memory that each
operation aimed at a memory names.

They stand apart from the models because every family of operations builds on them.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticKnownError

from dreamcycle.daemon import defaults
from dreamcycle.daemon.memory.limits import FIELD_MAX_CHARS
from dreamcycle.pulses.constants import QUERY_MAX_CHARS
from dreamcycle.store.database import CHUNK_KINDS, DELETION_POLICIES


def _refuse_boolean(kind: Literal["int_type", "float_type"]) -> BeforeValidator:
    """A number's validator that refuses true and false, which pydantic would read as 1 and
    0: JSON tells a boolean from a number, and so does the schema."""

    def refused(value: Any) -> Any:
        if isinstance(value, bool):
            raise PydanticKnownError(kind)
        return value

    return BeforeValidator(refused)


#: A request's numbers: a JSON boolean is refused where one is expected (the schema's
#: "number" and "integer" do not take one either).
Number = Annotated[float, _refuse_boolean("float_type")]
Integer = Annotated[int, _refuse_boolean("int_type")]
#: A number in a long list (a recall's vector): strict, which refuses booleans (and text)
#: as Number does, checked without a call back into Python per item.
ListedNumber = Annotated[float, Field(strict=True)]

ChunkHash = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="blake3 content hash")]
#: Wherever a hash is taken: the whole hash, or a prefix of at least 8 digits that only one
#: known hash starts (an ambiguous one is refused, listing the hashes it starts).
HASH_OR_UNIQUE_PREFIX = r"^[0-9a-f]{8,64}$"
DecisionRef = Annotated[
    str,
    Field(
        pattern=HASH_OR_UNIQUE_PREFIX,
        description="a decision hash, or a prefix of at least 8 digits only one decision has",
    ),
]
ChunkRef = Annotated[
    str,
    Field(
        pattern=HASH_OR_UNIQUE_PREFIX,
        description="a chunk hash, or a prefix of at least 8 digits only one chunk has",
    ),
]
HashOrPrefix = Annotated[
    str,
    Field(
        pattern=r"^[0-9a-f]{8,64}$",
        description="a chunk hash, or a unique prefix of at least 8 digits among the "
        "decision's recalled chunks",
    ),
]
Kind = Literal["fact", "preference", "insight", "summary", "note"]
DeletionPolicy = Literal["auto_prune", "manual_only", "never"]
# Bounded so that nothing a client sends can make one request unreasonably expensive; the
# same limits every other surface applies (daemon/memory/limits.py, pulses/constants.py).
MAX_TEXT_CHARS = QUERY_MAX_CHARS
#: A memory's fields: the protocol's limits, which every peer must be able to publish.
CONTENT_CHARS = FIELD_MAX_CHARS["content"]
TITLE_CHARS = FIELD_MAX_CHARS["title"]
LABEL_CHARS = FIELD_MAX_CHARS["type"]
MAX_TOP_K = defaults.RECALL_MAX_TOP_K
MAX_CITED = 100
#: An embedding is given as this many floats (the model's width is checked at run time).
MAX_VECTOR_LENGTH = 4096
#: The last millisecond of year 9999: times past it cannot be written as ISO dates.
MAX_TIME_MS = 253_402_300_799_999
#: SQLite's integers are 64-bit: a page offset beyond that cannot be asked of it.
MAX_OFFSET = (1 << 63) - 1

assert Kind.__args__ == CHUNK_KINDS  # type: ignore[attr-defined]
assert DeletionPolicy.__args__ == DELETION_POLICIES  # type: ignore[attr-defined]


class Strict(BaseModel):
    """Unknown fields are refused: a misspelt filter must not silently match everything.
    So are non-finite numbers (JSON has none, but parsers read Infinity, NaN and 1e400):
    no bound holds against them, and an answer quoting one would not be JSON. Numbers are
    `Number` and `Integer`, which refuse booleans; text that must say something has the
    pattern NOT_BLANK, so that empty and white space only are refused alike, as the schema
    says."""

    model_config = ConfigDict(
        extra="forbid", allow_inf_nan=False, json_schema_extra=lambda schema: bounds_named(schema)
    )


#: Bounds as pydantic leaves them on an optional `Number` or `Integer`, and as JSON Schema
#: names them (else a schema-driven client reads such a number as unbounded).
_BOUND_NAMES: Final = {
    "ge": "minimum", "le": "maximum", "gt": "exclusiveMinimum", "lt": "exclusiveMaximum"
}  # fmt: skip


def bounds_named(schema: Any) -> None:
    """Rename, throughout `schema`, the bounds of optional numbers to JSON Schema's words."""
    if isinstance(schema, dict):
        if schema.get("type") in ("integer", "number"):
            for ours, theirs in _BOUND_NAMES.items():
                if ours in schema:
                    schema[theirs] = schema.pop(ours)
        for value in schema.values():
            bounds_named(value)
    elif isinstance(schema, list):
        for item in schema:
            bounds_named(item)


# ---- one memory, named ------------------------------------------------------------------


class RefRequest(Strict):
    ref: str = Field(
        pattern=HASH_OR_UNIQUE_PREFIX,
        description="a chunk hash, or a prefix of at least 8 digits that only one chunk has",
    )
