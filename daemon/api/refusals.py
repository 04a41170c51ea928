"""A request that does not validate, refused in words: each field named with the rule it
breaks.

The models' validation (pydantic) says what failed as an error type with its context (a
bound, a pattern, the choices); here each becomes a sentence of this API's own, the same
over HTTP (daemon/api/http.py), from an MCP tool (daemon/api/mcp_server.py), from the
Python client (daemon/api/client_requests.py) and on a command's error line. Nothing here points
anywhere else to read more: the reason is the whole answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from pydantic import ValidationError
from pydantic_core import ErrorDetails

__all__ = ["NOT_BLANK", "field_errors", "field_name", "rule", "summary", "text_of"]

#: Text holding more than white space: a character that is not space to Python's
#: str.isspace(), which the operations trim with. Written out character by character, so
#: that the pattern means the same to pydantic, to JSON Schema's regular expressions (the
#: OpenAPI document) and to Python's.
NOT_BLANK: Final = (
    r"[^\t\n\v\f\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
)
#: What a pattern asks for, in words, where the pattern alone would be hard to read.
_PATTERNS: Final[Mapping[str, str]] = {
    NOT_BLANK: "must not be blank",
    r"^[0-9a-f]{64}$": "must be a hash of 64 hex digits (0-9, a-f)",
    r"^[0-9a-f]{8,64}$": "must be a hash of 64 hex digits (0-9, a-f), or a prefix of one of "
    "at least 8",
}


def _number(value: Any) -> str:
    """A bound as written in a sentence: 1 rather than 1.0."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return str(int(value)) if abs(value) < 1e16 else repr(value)
    return str(value)


def _items(count: Any) -> str:
    return f"{count} item" if count == 1 else f"{count} items"


def _characters(count: Any) -> str:
    return f"{count} character" if count == 1 else f"{count} characters"


def _a_number(error: ErrorDetails) -> str:
    if isinstance(error.get("input"), bool):
        return "must be a number, not true or false"
    return "must be a number"


def _an_integer(error: ErrorDetails) -> str:
    if isinstance(error.get("input"), bool):
        return "must be an integer, not true or false"
    return "must be an integer"


def _pattern(error: ErrorDetails) -> str:
    pattern = str(_ctx(error).get("pattern", ""))
    return _PATTERNS.get(pattern, f"must match the pattern {pattern}")


def _too_short_text(error: ErrorDetails) -> str:
    least = _ctx(error).get("min_length", 1)
    return "must not be empty" if least == 1 else f"must be at least {_characters(least)} long"


def _value(error: ErrorDetails) -> str:
    """A validator's own reason (the models' and the operations' words), as it said it."""
    reason = _ctx(error).get("error")
    return str(reason) if reason is not None else error["msg"].removeprefix("Value error, ")


#: Each error type the models raise, in words; any other keeps the validator's message.
_RULES: Final[Mapping[str, Callable[[ErrorDetails], str]]] = {
    "missing": lambda e: "is required",
    "extra_forbidden": lambda e: "is not a field of this request (misspelt?)",
    "unexpected_keyword_argument": lambda e: "is not a field of this request (misspelt?)",
    "greater_than": lambda e: f"must be more than {_number(_ctx(e)['gt'])}",
    "greater_than_equal": lambda e: f"must be at least {_number(_ctx(e)['ge'])}",
    "less_than": lambda e: f"must be less than {_number(_ctx(e)['lt'])}",
    "less_than_equal": lambda e: f"must be at most {_number(_ctx(e)['le'])}",
    "finite_number": lambda e: "must be a finite number (JSON has no Infinity or NaN)",
    "string_too_short": _too_short_text,
    "string_too_long": lambda e: f"must be at most {_characters(_ctx(e)['max_length'])} long",
    "string_pattern_mismatch": _pattern,
    "too_short": lambda e: f"must hold at least {_items(_ctx(e)['min_length'])}",
    "too_long": lambda e: f"must hold at most {_items(_ctx(e)['max_length'])}",
    "literal_error": lambda e: f"must be one of {_ctx(e)['expected']}",
    "enum": lambda e: f"must be one of {_ctx(e)['expected']}",
    "int_type": _an_integer,
    "int_parsing": _an_integer,
    "int_from_float": lambda e: "must be a whole number",
    "int_parsing_size": lambda e: "must be an integer SQLite can hold (64 bits)",
    "float_type": _a_number,
    "float_parsing": _a_number,
    "bool_type": lambda e: "must be true or false",
    "bool_parsing": lambda e: "must be true or false",
    "string_type": lambda e: "must be text",
    "string_unicode": lambda e: "must be text (UTF-8)",
    "list_type": lambda e: "must be a list",
    "dict_type": lambda e: "must be an object",
    "model_type": lambda e: "must be an object",
    "model_attributes_type": lambda e: "must be an object",
    "json_invalid": lambda e: f"is not JSON: {_ctx(e).get('error', 'unreadable')}",
    "json_type": lambda e: "must be JSON text",
    "value_error": _value,
    "assertion_error": _value,
}


def _ctx(error: ErrorDetails) -> Mapping[str, Any]:
    return error.get("ctx") or {}


def rule(error: ErrorDetails) -> str:
    """What `error` says is wrong with its field, in words."""
    worded = _RULES.get(error["type"])
    try:
        return worded(error) if worded is not None else error["msg"]
    except KeyError:  # a context without what its type usually carries
        return error["msg"]


def field_name(loc: Sequence[str | int], *, part_first: bool = False) -> str:
    """A location as a reader names the field: `filters.project`, `vector[3]`; a request
    refused as a whole is the `request`. With `part_first`, the location starts with the
    HTTP request's part (body, query, path), which is left out."""
    name = ""
    for part in loc[1:] if part_first else loc:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name or "request"


def summary(errors: Iterable[ErrorDetails], *, part_first: bool = False) -> str:
    """Every field's reason, as one line: `reward: must be at most 1; colour: ...`."""
    return "; ".join(f"{_where(error, part_first)}: {rule(error)}" for error in errors)


def _where(error: ErrorDetails, part_first: bool) -> str:
    if error["type"] == "json_invalid":  # located at a character of the body, not a field
        return "body"
    return field_name(error["loc"], part_first=part_first)


def text_of(exc: ValidationError) -> str:
    """A validation failure in words (never `str(exc)`, which points elsewhere to read)."""
    return summary(exc.errors(include_url=False))


def field_errors(errors: Iterable[ErrorDetails]) -> list[dict[str, Any]]:
    """Each error as an HTTP refusal lists it: where (`loc`), the rule in words (`msg`),
    its type, what was given (`input`) and the rule's bounds (`ctx`, JSON's values only)."""
    listed = []
    for error in errors:
        item: dict[str, Any] = {
            "loc": list(error["loc"]),
            "msg": rule(error),
            "type": error["type"],
            "input": error.get("input"),
        }
        ctx = {
            key: value
            if isinstance(value, str | int | float | bool) or value is None
            else str(value)
            for key, value in _ctx(error).items()
        }
        if ctx:
            item["ctx"] = ctx
        listed.append(item)
    return listed
