"""Content addressing: the storage unit is the blake3 hash of normalised content."""

from __future__ import annotations

import unicodedata

import blake3


def normalise_content(text: str) -> str:
    """NFC, whitespace collapsed, trimmed: texts that differ only in spacing are one chunk."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def content_hash(text: str) -> str:
    """64 hex digits of blake3 over the normalised UTF-8 content."""
    return blake3.blake3(normalise_content(text).encode("utf-8")).hexdigest()
