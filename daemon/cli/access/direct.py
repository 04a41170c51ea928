"""The direct way: each operation opens the database in this process (and loads the model
when it embeds), then closes it; safe beside a running daemon."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dreamcycle.daemon.config import Config
    from dreamcycle.daemon.intake.ingest import IngestReport
    from dreamcycle.daemon.intake.reingest import MetadataReport
    from dreamcycle.store.database import NewObservation

from dreamcycle.daemon.cli.access.protocol import (
    ColdChunk,
    ColdPage,
    Progress,
    PulseSpec,
    Queued,
    Recalled,
    RecalledChunk,
    Via,
    not_cold,
)


class DirectAccess:
    """Each operation opens the database (and loads the model when it embeds), then closes."""

    via: Via = "direct"

    def __init__(self, config: Config) -> None:
        self.config = config

    def recall(
        self,
        query: str,
        *,
        top_k: int | None,
        decision: str | None,
        record: bool,
        min_confidence: float = 0.0,
    ) -> Recalled:
        from dreamcycle.daemon.recall.retrieve import recall
        from dreamcycle.daemon.runtime import Runtime

        rt = Runtime.open(self.config)
        try:
            result = recall(
                rt,
                query,
                top_k=top_k,
                decision_text=decision,
                record=record,
                min_confidence=min_confidence,
            )
        finally:
            rt.close()
        names = [f.name for f in fields(RecalledChunk)]
        return Recalled(
            result.decision_hash,
            [RecalledChunk(**{name: getattr(hit, name) for name in names}) for hit in result.hits],
        )

    def status(self) -> dict[str, Any]:
        from dreamcycle.daemon.memory.status_report import status_report
        from dreamcycle.store.database import Database

        if not self.config.database_path.exists():
            raise ValueError(
                f"no database at {self.config.database_path}: nothing ingested or run yet"
            )
        db = Database(self.config.database_path)
        try:
            return status_report(db, self.config.peer.id)
        finally:
            db.close()

    def forgotten(self, *, limit: int, offset: int) -> ColdPage:
        from dreamcycle.daemon.runtime import Runtime
        from dreamcycle.store import tiers

        rt = Runtime.open(self.config)
        try:
            rows = tiers.cold_chunks(rt.db, limit=limit, offset=offset)
            total = rt.db.counts()["cold"]
        finally:
            rt.close()
        return ColdPage(
            total,
            [ColdChunk(r.content_hash, r.cold_at, r.reason, r.salience, r.text) for r in rows],
        )

    def revive(self, content_hash: str) -> None:
        from dreamcycle.daemon.intake.emit import UnknownHash, resolve_hash
        from dreamcycle.daemon.runtime import Runtime
        from dreamcycle.store import tiers

        rt = Runtime.open(self.config)
        try:
            try:
                digest = resolve_hash(rt, "chunk", content_hash)
            except UnknownHash:
                raise ValueError(not_cold(content_hash)) from None
            rowid = tiers.cold_rowid_of_hash(rt.db, digest)
            if rowid is None:
                raise ValueError(not_cold(digest))
            with rt.db.transaction():
                tiers.request_revival(rt.db, rowid, now_ms=rt.clock.now_ms())
        finally:
            rt.close()

    def outcome(
        self,
        *,
        decision: str,
        reward: float,
        reason: str,
        cited: Sequence[str],
        decided_elsewhere: bool = False,
    ) -> Queued:
        from dreamcycle.daemon.intake.emit_outcomes import emit_outcome

        return self._emit(
            lambda rt: emit_outcome(
                rt,
                decision=decision,
                reward=reward,
                reason=reason,
                cited=cited,
                decided_elsewhere=decided_elsewhere,
            )
        )

    def pulse(self, spec: PulseSpec) -> Queued:
        from dreamcycle.daemon.intake.emit_pulses import PulseRequest, emit_pulse
        from dreamcycle.pulses.pulse import PulseKind

        request = PulseRequest(**{**asdict(spec), "kind": PulseKind(spec.kind)})
        return self._emit(lambda rt: emit_pulse(rt, request))

    def tombstone(
        self, *, content_hash: str, reason: str, ttl_s: float, held_elsewhere: bool = False
    ) -> Queued:
        from dreamcycle.daemon.intake.emit_tombstones import emit_tombstone

        return self._emit(
            lambda rt: emit_tombstone(
                rt, digest=content_hash, reason=reason, ttl_s=ttl_s, held_elsewhere=held_elsewhere
            )
        )

    def ingest(
        self,
        files: Sequence[Sequence[NewObservation]],
        *,
        embed: bool,
        progress: Progress | None,
    ) -> IngestReport:
        from dreamcycle.daemon.intake.ingest import ingest
        from dreamcycle.daemon.runtime import Runtime

        rt = Runtime.open(self.config)
        try:
            return ingest(rt, files, embed=embed, progress=progress)
        finally:
            rt.close()

    def check_metadata(self, files: Sequence[Sequence[NewObservation]]) -> None:
        """Refuse content stored before with metadata that cannot change (daemon/intake/reingest.py)."""
        from dreamcycle.daemon.intake.reingest import check_fixed
        from dreamcycle.daemon.runtime import Runtime

        if not self.config.database_path.exists():
            return  # nothing is stored yet, and a check creates nothing
        rt = Runtime.open(self.config)
        try:
            check_fixed(rt.db, [item for file in files for item in file])
        finally:
            rt.close()

    def apply_metadata(self, files: Sequence[Sequence[NewObservation]]) -> MetadataReport:
        """Content ingested again gets the metadata its files give now (daemon/intake/reingest.py)."""
        from dreamcycle.daemon.intake.reingest import apply_metadata
        from dreamcycle.daemon.runtime import Runtime

        rt = Runtime.open(self.config)
        try:
            return apply_metadata(rt, [item for file in files for item in file])
        finally:
            rt.close()

    def _emit(self, emit: Callable[[Any], Any]) -> Queued:
        from dreamcycle.daemon.runtime import Runtime

        rt = Runtime.open(self.config)
        try:
            emitted = emit(rt)
        finally:
            rt.close()
        return Queued(emitted.entry_id, emitted.new)
