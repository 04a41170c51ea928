"""What every table's queries stand on: one apsw connection and two ways to read through it.

Each table module of store/ defines a mixin of this class holding that table's queries;
`store.database.Database` assembles them and owns the connection itself (opening,
closing, transactions, migrations). The mixins write only inside the caller's
transaction and never commit on their own.
"""

from __future__ import annotations

from typing import Any

import apsw


class TableQueries:
    conn: apsw.Connection

    # apsw types a column as a union of every SQLite type; callers know the schema.
    def _one(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        return self.conn.execute(sql, params).fetchone()

    def _all(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        return self.conn.execute(sql, params).fetchall()

    # The stores of other tables (tiers, keys, lexical) query through these.
    fetch_one = _one
    fetch_all = _all
