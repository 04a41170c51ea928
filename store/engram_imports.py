"""What was imported from engram databases: engram's identity of a memory -> the chunk."""

from __future__ import annotations

from dataclasses import astuple, dataclass, fields
from typing import Final

from dreamcycle.store.database import Database


@dataclass(frozen=True)
class ImportRecord:
    source_key: str
    content_hash: str
    fingerprint: str
    source_path: str
    source_id: str
    created_at: str | None
    updated_at: str | None
    revision_count: int | None
    deleted_at: str | None
    imported_ms: int


_COLUMNS: Final = ", ".join(f.name for f in fields(ImportRecord))


def import_records(db: Database) -> dict[str, ImportRecord]:
    """Every record, by source key (tens of thousands at most: one per engram memory)."""
    return {
        str(row[0]): ImportRecord(*row)
        for row in db.fetch_all(f"SELECT {_COLUMNS} FROM engram_imports")
    }


def save_import_record(db: Database, record: ImportRecord) -> None:
    """Insert or replace the record of its source key (inside the caller's transaction)."""
    marks = ", ".join("?" * len(fields(ImportRecord)))
    db.conn.execute(
        f"INSERT OR REPLACE INTO engram_imports ({_COLUMNS}) VALUES ({marks})", astuple(record)
    )
