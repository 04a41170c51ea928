"""What every table's queries stand on: one apsw connection and two ways to read through it.

Each table module of store/ defines a mixin of this class holding that table's queries;
`store.database.Database` assembles them and owns the connection itself (opening,
closing, transactions, migrations). The mixins write only inside the caller's
transaction and never commit on their own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

import apsw

#: Values bound into one `IN (...)` list at most: SQLite refuses a statement of more than
#: 32,766 parameters, and a sweep of a large store moves more chunks than that at once.
IN_LIST_BATCH: Final = 10_000


class TableQueries:
    conn: apsw.Connection

    # apsw types a column as a union of every SQLite type; callers know the schema.
    def _one(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        return self.conn.execute(sql, params).fetchone()

    def _all(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        return self.conn.execute(sql, params).fetchall()

    def _all_in(self, sql: str, values: Sequence[Any]) -> list[Any]:
        """The rows of `sql`, whose one `{marks}` stands for an `IN` list of `values`, read
        a batch of IN_LIST_BATCH values at a time."""
        rows: list[Any] = []
        for start in range(0, len(values), IN_LIST_BATCH):
            part = tuple(values[start : start + IN_LIST_BATCH])
            rows += self.conn.execute(sql.format(marks=",".join("?" * len(part))), part).fetchall()
        return rows

    def _packed(
        self, value: str, tail: str, params: tuple[Any, ...] = (), *, order_by: str = ""
    ) -> list[Any]:
        """`SELECT value tail` as a list (a value of several columns is a `json_array`),
        read in one step: SQLite packs every row into one JSON array.

        apsw lets go of the GIL around each step, and taking it back waits out the switch
        interval whenever another thread is running Python (a dream cycle is), so a read
        of many rows pays that wait per row exactly when the daemon is busy. Recall's reads
        of many rows come this way. JSON carries a REAL exactly (tests/test_packed_reads.py
        checks). Rows come in no particular order unless `order_by` orders them.
        """
        order = f" ORDER BY {order_by}" if order_by else ""
        packed = self._one(f"SELECT json_group_array({value}{order}) {tail}", params)
        found: list[Any] = json.loads(packed[0])
        return found

    # The stores of other tables (tiers, keys, lexical) query through these.
    fetch_one = _one
    fetch_all = _all
    fetch_all_in = _all_in
    fetch_packed = _packed
