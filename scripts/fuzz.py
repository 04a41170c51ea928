"""Fuzz every reader of hostile input: no crash, no hang, no unbounded memory, no state change.

    .venv/bin/python scripts/fuzz.py                          # 100,000 cases, several minutes
    .venv/bin/python scripts/fuzz.py --cases 5000 --target config --seed 7

Targets (structure-aware: each case starts from a valid input and breaks it):

* entry_codec: wire objects of every entry kind with fields replaced, removed or added
  (ids recomputed so the mutation reaches the field rules), and mutated lines; only
  InvalidEntry may escape decode_entry, a valid entry round-trips to itself.
* segment: decode_segment over mutated gzip bytes and mutated payloads (truncated,
  invalid UTF-8, deep nesting, huge lines, many newlines), and once per run the heavy
  shapes: a compressed bomb, a payload of MAX_SEGMENT_EXPANDED_BYTES newlines, one huge line.
* snapshot: Zeitgeist.latest_snapshot over a directory log whose newest snapshot is
  mutated (it must fall back to the older sound one exactly when the newest is
  corrupt, holds an entry dated after itself, or lacks an entry of the older one),
  fold_entries, and Heartbeat.from_bytes.
* pulse: SalientPulse.validate, validate_parameters and Outcome / Attribution validate
  over arbitrary floats, ints and strings, and SalientPulse.from_json over mutated wire
  pulses: a valid pulse is within every bound, a refusal is InvalidPulse naming a field.
* config: load_config over generated TOML and DREAMCYCLE_* variables: only ConfigError,
  naming the key, the variable or the file.
* cli: `dreamcycle` and `pulse-emit` in this process with generated argv for every verb,
  against a real data directory: exit 0, 2 or 3 (never 1, never a traceback), a message
  on stderr for a refusal, and a refused command leaves the database and files unchanged.

Per target it prints cases run, refused (with a clear error), accepted, findings, the
longest case and the largest peak RSS growth of one case; the JSON (--out) holds the
same with every finding (input, traceback). Exit 1 if anything was found.

One file: a fuzzer that runs as one standalone script, whose targets share the case runner
(time limit, peak memory) and the hostile values.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gzip
import hashlib
import io
import json
import logging
import math
import random
import signal
import sqlite3
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, ClassVar, Final

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import blake3
import numpy as np

from dreamcycle.daemon import defaults
from dreamcycle.daemon.cli import main as dreamcycle_cli
from dreamcycle.daemon.cli import pulse_emit as pulse_emit_cli
from dreamcycle.daemon.config import ConfigError, load_config
from dreamcycle.daemon.config.settings import BY_NAME, SETTINGS
from dreamcycle.pulses.constants import (
    K_MAX,
    MAX_HOPS_MAX,
    MOVED_SALIENCE_MAX,
    SIGMA_MAX,
    STRENGTH_MAX,
    TTL_MAX_S,
)
from dreamcycle.pulses.outcome import Attribution, InvalidOutcome, Outcome
from dreamcycle.pulses.pulse import (
    InvalidPulse,
    PulseKind,
    SalientPulse,
    max_hops_allowed,
    moved_salience_bound,
    validate_parameters,
)
from dreamcycle.zeitgeist.directory import DirectoryBackend
from dreamcycle.zeitgeist.entries import (
    ENTRY_TYPES,
    MAX_SEGMENT_EXPANDED_BYTES,
    SNAPSHOT_LIMITS,
    AssertEntry,
    AttributionEntry,
    CorruptSegment,
    Entry,
    InvalidEntry,
    OutcomeEntry,
    PulseEntry,
    ReconsolidateEntry,
    RetrievalKeyEntry,
    SupersedeEntry,
    TombstoneEntry,
    canonical_json,
    decode_entry,
    decode_segment,
    encode_entry,
    encode_segment,
    entry_order_key,
)
from dreamcycle.zeitgeist.hlc import HLC_MAX, HybridLogicalClock, hlc_from_ms
from dreamcycle.zeitgeist.log import Heartbeat, InvalidHeartbeat, Zeitgeist
from dreamcycle.zeitgeist.object_keys import snapshot_key
from dreamcycle.zeitgeist.snapshot import fold_entries
from scripts.bench_common import (
    Column,
    describe_machine,
    machine_summary,
    print_table,
    write_json,
)

DEFAULT_CASES: Final = 100_000
DEFAULT_SEED: Final = 0
DEFAULT_OUT: Final = Path("bench-results/fuzz.json")
#: Share of --cases each target gets: a case of the CLI costs orders of magnitude more than one
#: of the codec.
WEIGHTS: Final = {
    "entry_codec": 0.30,
    "segment": 0.15,
    "snapshot": 0.10,
    "pulse": 0.25,
    "config": 0.15,
    "cli": 0.05,
}
#: A case running longer than its target's limit is interrupted and counted as a hang.
MIB: Final = 1024 * 1024
KIB_PER_MIB: Final = 1024
#: Characters of an input kept in a finding.
PREVIEW_CHARS: Final = 300
BASE_MS: Final = 1_750_000_000_000
PEERS: Final = ("peer_a", "peer_b", "p.3", "_x", "Z" * 64)
DIMS: Final = (1, 3, 8, 384)


# ---- verdicts and findings ------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """What the code under test did with one input: took it, or refused it with `message`."""

    accepted: bool
    message: str = ""


ACCEPTED: Final = Verdict(True)


class Violation(Exception):
    """The code answered, but not as its contract says (round trip, bound, state, message)."""


class CaseTimeout(BaseException):
    """Raised by the alarm; a BaseException so that `except Exception` under test cannot eat it."""


@dataclass(frozen=True)
class Finding:
    target: str
    kind: str  # crash, violation, hang, memory
    input: str
    detail: str
    #: Where it came from (exception type and innermost frame), to group repeats.
    signature: str


@dataclass
class TargetReport:
    target: str
    cases: int = 0
    rejected: int = 0
    accepted: int = 0
    findings: list[Finding] = field(default_factory=list)
    max_case_s: float = 0.0
    peak_rss_growth_mib: float = 0.0
    retained_rss_mib: float = 0.0
    seconds: float = 0.0

    @property
    def crashes(self) -> int:
        return len(self.findings)

    def row(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "cases": self.cases,
            "rejected": self.rejected,
            "accepted": self.accepted,
            "findings": self.crashes,
            "max_case_ms": self.max_case_s * 1000,
            "peak_rss_growth_mib": self.peak_rss_growth_mib,
            "seconds": self.seconds,
        }


@dataclass(frozen=True)
class Case:
    """One input: `run` feeds it to the code under test and checks what came back."""

    describe: Callable[[], str]
    run: Callable[[], Verdict]


def preview(value: Any, chars: int = PREVIEW_CHARS) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= chars else f"{text[:chars]}... ({len(text)} chars)"


def signature_of(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "/scripts/fuzz.py" not in f.filename] or frames
    where = f"{Path(ours[-1].filename).name}:{ours[-1].name}" if ours else "?"
    return f"{type(exc).__name__} in {where}"


# ---- measuring a case: time limit and peak memory -----------------------------------------


def _status_kib(field_name: str) -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field_name):
                return int(line.split()[1])
    return 0


def _reset_peak_rss() -> int:
    """Reset the kernel's high-water mark to the current RSS (Linux); return that RSS in KiB."""
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")
    return _status_kib("VmRSS:")


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise CaseTimeout


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ---- hostile values -------------------------------------------------------------------------

HOSTILE_NUMBERS: Final[tuple[Any, ...]] = (
    0,
    -0.0,
    -1,
    1,
    2,
    16,
    17,
    64,
    65,
    255,
    256,
    2**31,
    2**63 - 1,
    2**63,
    2**64,
    -(2**63) - 1,
    10**30,
    10**400,
    -(10**400),
    0.5,
    1.0000001,
    1e-300,
    5e-324,
    2.2250738585072014e-308,
    1e308,
    -1e308,
    math.inf,
    -math.inf,
    math.nan,
)
ODD_TEXTS: Final = (
    "",
    " ",
    "\t\n",
    "\x00",
    "\ud800",
    "\u202e",
    "é",
    "\U0001f600",
    "-",
    "/",
    "..",
    ".hidden",
    "inf",
    "nan",
    "NaN",
    "-1",
    "1e999",
    "0x10",
    "１２",
    "²",
    "true",
    "null",
    "a" * 63,
    "a" * 65,
    "0" * 64,
    "F" * 64,
)


def hostile_text(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.4:
        return rng.choice(ODD_TEXTS)
    if roll < 0.7:
        return "".join(chr(rng.randrange(0x20, 0x250)) for _ in range(rng.randrange(0, 40)))
    if roll < 0.85:
        return "".join(chr(rng.randrange(0, 0x110000)) for _ in range(rng.randrange(1, 12)))
    if roll < 0.97:
        return rng.choice("ax0.é") * rng.choice((100, 1001, 4097))
    return "x" * rng.choice((100_000, 1_000_000))


def hostile_number(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.5:
        return rng.choice(HOSTILE_NUMBERS)
    if roll < 0.7:
        return rng.randint(-(2**70), 2**70) >> rng.randrange(0, 70)
    if roll < 0.9:
        return rng.uniform(-2.0, 2.0)
    return math.copysign(10.0 ** rng.uniform(-320, 308), rng.random() - 0.5)


def hostile_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if roll < 0.35:
        return hostile_number(rng)
    if roll < 0.65:
        return hostile_text(rng)
    if roll < 0.72:
        return rng.choice((None, True, False))
    if roll < 0.82 and depth < 3:
        return [hostile_value(rng, depth + 1) for _ in range(rng.randrange(0, 4))]
    if roll < 0.92 and depth < 3:
        return {hostile_text(rng): hostile_value(rng, depth + 1) for _ in range(rng.randrange(3))}
    return {} if rng.random() < 0.5 else []


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    """One to four byte-level edits: flip, delete, insert, duplicate, truncate, splice."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(out) + 1)
        op = rng.randrange(6)
        if op == 0 and out:
            out[min(at, len(out) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1:
            del out[at : at + rng.randint(1, 16)]
        elif op == 2:
            out[at:at] = rng.randbytes(rng.randint(1, 8))
        elif op == 3:
            out[at:at] = out[at : at + rng.randint(1, 64)]
        elif op == 4:
            del out[at:]
        else:
            out[at:at] = rng.choice((b'"', b"\\", b"{", b"]", b"\n", b"\xff", b"\xc3", b"0", b"-"))
    return bytes(out)


# ---- valid inputs to start from ---------------------------------------------------------------


def random_hash(rng: random.Random) -> str:
    return rng.randbytes(32).hex()


def random_text(rng: random.Random) -> str:
    return "".join(chr(rng.randrange(0x20, 0x3000)) for _ in range(rng.randrange(0, 30)))


def unit_vector(rng: random.Random, dim: int | None = None) -> np.ndarray:
    width = dim or rng.choice(DIMS)
    vector = np.array([rng.uniform(-1, 1) for _ in range(width)], dtype=np.float32)
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm else vector


def valid_pulse(
    rng: random.Random, kind: PulseKind | None = None, seed_hash: str | None = None
) -> SalientPulse:
    kind = kind or rng.choice((PulseKind.REWARD, PulseKind.DECAY))
    forget = kind is PulseKind.FORGET
    k = rng.randint(1, 8)
    sigma = rng.uniform(0.1, 2.0)
    return SalientPulse(
        seed_embedding=unit_vector(rng),
        kind=kind,
        strength=math.inf if forget else rng.uniform(0.0, 1.0),
        sigma=sigma,
        max_hops=0 if forget else rng.randint(0, min(2, max_hops_allowed(sigma))),
        k=k,
        decay_per_hop=rng.uniform(0.0, 0.99 / k),
        ts=hlc_from_ms(BASE_MS + rng.randrange(10**9)) + rng.randrange(1 << 16),
        origin_peer=rng.choice(PEERS),
        reason=random_text(rng) or "why",
        ttl_s=rng.uniform(1.0, 1e6),
        index_version=rng.choice(("minilm/384", "m/3", "")),
        seed_hash=seed_hash if forget else rng.choice((None, random_hash(rng))),
    ).with_id()


def valid_entry(rng: random.Random, kind: str | None = None) -> Entry:
    """A random valid entry of `kind` (any kind when None)."""
    kind = kind or rng.choice(sorted(ENTRY_TYPES))
    envelope: dict[str, Any] = {
        "hlc": rng.choice((0, HLC_MAX, rng.randrange(HLC_MAX))),
        "origin": rng.choice(PEERS),
    }
    maybe_text = rng.choice((None, random_text(rng)))
    if kind == "assert":
        return AssertEntry(
            **envelope,
            content_hash=random_hash(rng),
            title=random_text(rng),
            content=random_text(rng),
            obs_type=random_text(rng) or "note",
            project=maybe_text,
            scope="project",
            topic_key=rng.choice((None, "a/b")),
            session_id=maybe_text,
            tool_name=None,
            chunk_kind=rng.choice(("fact", "note")),
            pin_floor=rng.choice((0.0, 1.0, rng.random())),
            embedding=unit_vector(rng),
            model_id="m",
            index_version="m/384",
        )
    if kind == "supersede":
        old = random_hash(rng)
        # Derived, so that a source of repeated bytes cannot make a chunk supersede itself.
        new = blake3.blake3(old.encode("ascii")).hexdigest()
        return SupersedeEntry(**envelope, old_hash=old, new_hash=new, reason=random_text(rng))
    if kind == "reconsolidate":
        choices: dict[str, Any] = {
            "title": random_text(rng),
            "topic_key": maybe_text,
            "pin_floor": rng.random(),
            "importance": rng.choice((None, rng.uniform(-10, 10))),
        }
        chosen = rng.sample(sorted(choices), rng.randint(1, len(choices)))
        return ReconsolidateEntry(
            **envelope, content_hash=random_hash(rng), changes={k: choices[k] for k in chosen}
        )
    if kind == "tombstone":
        digest = random_hash(rng)
        forget = valid_pulse(rng, PulseKind.FORGET, digest) if rng.random() < 0.6 else None
        return TombstoneEntry(
            **envelope,
            content_hash=digest,
            reason=random_text(rng),
            collectable_after_ms=rng.choice((None, 0, rng.randrange(2**62))),
            forget_pulse=forget,
        )
    if kind == "salience_pulse":
        return PulseEntry(**envelope, pulse=valid_pulse(rng))
    if kind == "outcome":
        return OutcomeEntry(
            **envelope,
            decision_hash=random_hash(rng),
            reward=rng.uniform(-1, 1),
            observer_peer=rng.choice(PEERS),
            reason=random_text(rng),
            cited=tuple(random_hash(rng) for _ in range(rng.randrange(3))),
        )
    if kind == "attribution":
        return AttributionEntry(
            **envelope,
            decision_hash=random_hash(rng),
            chunk_hashes=tuple(random_hash(rng) for _ in range(rng.randrange(4))),
            decision_text=random_text(rng),
        )
    return RetrievalKeyEntry(
        **envelope,
        decision_hash=random_hash(rng),
        chunk_hash=random_hash(rng),
        embedding=unit_vector(rng),
        text=maybe_text,
        amount=rng.uniform(-1, 1),
    )


def dated_by(entry: Entry, hlc: int) -> Entry:
    """`entry`, dated no later than `hlc` (as in a snapshot or segment of that time)."""
    return entry if entry.hlc <= hlc else dataclasses.replace(entry, hlc=hlc)


def pulse_wire_id(pulse: Mapping[str, Any]) -> str:
    """The id a pulse's wire object would carry, for mutations meant to get past the id check."""
    body = {k: v for k, v in pulse.items() if k != "pulse_id"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return blake3.blake3(canonical).digest(16).hex()


def with_fresh_ids(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` with its ids recomputed from its (mutated) content, where that can be done."""
    with contextlib.suppress(ValueError, TypeError, RecursionError, OverflowError):
        pulse = obj.get("pulse")
        if isinstance(pulse, dict):
            pulse["pulse_id"] = pulse_wire_id(pulse)
            obj["id"] = pulse["pulse_id"]
            return obj
        forget = obj.get("forget_pulse")
        if isinstance(forget, dict):
            forget["pulse_id"] = pulse_wire_id(forget)
        body = {k: v for k, v in obj.items() if k != "id"}
        obj["id"] = blake3.blake3(canonical_json(body)).digest(16).hex()
    return obj


def mutate_object(rng: random.Random, obj: dict[str, Any]) -> dict[str, Any]:
    """One to three field edits, in the envelope, the body or a nested pulse / changes."""
    for _ in range(rng.randint(1, 3)):
        target = obj
        nested = [v for v in obj.values() if isinstance(v, dict)]
        if nested and rng.random() < 0.4:
            target = rng.choice(nested)
        keys = sorted(target)
        op = rng.random()
        if op < 0.65 and keys:
            target[rng.choice(keys)] = hostile_value(rng)
        elif op < 0.8 and keys:
            del target[rng.choice(keys)]
        elif op < 0.9:
            target[rng.choice(("extra", "v", "kind", "id", *keys))] = hostile_value(rng)
        elif keys:
            a, b = rng.choice(keys), rng.choice(keys)
            target[a], target[b] = target[b], target[a]
    return obj


def require(condition: bool, problem: str) -> None:
    if not condition:
        raise Violation(problem)


def refused(exc: Exception) -> Verdict:
    message = str(exc)
    require(bool(message.strip()), f"{type(exc).__name__} without a message")
    return Verdict(False, message)


# ---- targets --------------------------------------------------------------------------------


class Target:
    name: ClassVar[str]
    #: Longest a case may run (seconds) before it counts as a hang.
    time_limit_s: ClassVar[float] = 10.0
    #: Largest peak RSS growth of one case (MiB) before it counts as unbounded memory.
    memory_limit_mib: ClassVar[float] = 64.0

    def __init__(self, workdir: Path, *, heavy: bool) -> None:
        self.workdir = workdir
        self.heavy = heavy

    def case(self, rng: random.Random, number: int) -> Case:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the target opened."""


class EntryCodec(Target):
    name = "entry_codec"

    def case(self, rng: random.Random, number: int) -> Case:
        entry = valid_entry(rng)
        roll = rng.random()
        if roll < 0.2:
            return Case(
                lambda: f"round trip of {entry.wire_bytes!r}", lambda: self.round_trip(entry)
            )
        if roll < 0.75:
            obj = mutate_object(rng, json.loads(entry.wire_bytes))
            if rng.random() < 0.8:
                obj = with_fresh_ids(obj)
            return Case(lambda: f"decode_entry({obj!r})", lambda: self.decode_object(obj))
        line = mutate_bytes(rng, entry.wire_bytes)
        return Case(lambda: f"segment line {line!r}", lambda: self.decode_line(line))

    @staticmethod
    def round_trip(entry: Entry) -> Verdict:
        again = decode_entry(encode_entry(entry))
        require(again == entry, f"decode(encode(e)) differs: {again.wire_bytes!r}")
        from_bytes = decode_entry(json.loads(entry.wire_bytes))
        require(from_bytes.wire_bytes == entry.wire_bytes, "the wire bytes changed")
        return ACCEPTED

    @staticmethod
    def decode_object(obj: dict[str, Any]) -> Verdict:
        try:
            entry = decode_entry(obj)
        except InvalidEntry as exc:
            return refused(exc)
        require(decode_entry(encode_entry(entry)) == entry, "an accepted entry does not round-trip")
        return ACCEPTED

    @staticmethod
    def decode_line(line: bytes) -> Verdict:
        try:
            decoded = decode_segment(gzip.compress(line + b"\n", mtime=0))
        except CorruptSegment as exc:  # a mutation that broke UTF-8
            return refused(exc)
        if decoded.rejected:
            return refused(InvalidEntry(decoded.rejected[0].reason))
        return ACCEPTED


def payload_shapes(rng: random.Random, payload: bytes) -> bytes:
    """A payload edited line by line, or replaced by a hostile shape."""
    lines = payload.split(b"\n")
    op = rng.randrange(10)
    if op == 0 and lines:
        del lines[rng.randrange(len(lines))]
    elif op == 1 and lines:
        lines.insert(rng.randrange(len(lines) + 1), rng.choice(lines))
    elif op == 2:
        depth = rng.choice((10, 500, 5000, 100_000))
        lines.insert(0, b'{"v":1,"kind":"outcome","x":' + b"[" * depth + b"]" * depth + b"}")
    elif op == 3:
        lines.insert(0, b'{"v":1,"reason":"' + b"x" * rng.choice((10**5, 2 * MIB)) + b'"}')
    elif op == 4:
        return payload + b"\n" * rng.choice((1000, 100_000, MIB))
    elif op == 5:
        return payload.replace(
            b"\n", rng.choice((b"\r\n", b"\n\n\n", b"\x00\n", b"\n\xef\xbb\xbf"))
        )
    elif op == 6:
        lines.append(b'{"v":' + b"9" * rng.choice((20, 4000, 5000)) + b"}")
    elif op == 7:
        lines.append(b"\xff\xfe" + rng.randbytes(16))
    else:
        return mutate_bytes(rng, payload)
    return b"\n".join(lines)


class SegmentReader(Target):
    name = "segment"
    time_limit_s = 60.0
    #: A heavy case builds its input in the case (up to 256 MiB and its gzip); the reader
    #: adds one line at a time and the entries it keeps.
    memory_limit_mib = 1024.0

    def heavy_shapes(self) -> list[tuple[str, Callable[[], bytes]]]:
        limit = MAX_SEGMENT_EXPANDED_BYTES
        return [
            (
                "a gzip bomb: MAX_SEGMENT_EXPANDED_BYTES + 1 zero bytes",
                lambda: gzip.compress(b"\0" * (limit + 1)),
            ),
            ("MAX_SEGMENT_EXPANDED_BYTES newlines", lambda: gzip.compress(b"\n" * limit)),
            (
                "one line of 200 MiB",
                lambda: gzip.compress(b'{"v":1,"a":"' + b"x" * (200 * MIB) + b'"}'),
            ),
        ]

    def case(self, rng: random.Random, number: int) -> Case:
        shapes = self.heavy_shapes() if self.heavy else []
        if number < len(shapes):
            what, build = shapes[number]
            return Case(lambda: what, lambda: self.decode(build(), None))
        entries = [valid_entry(rng) for _ in range(rng.randint(1, 6))]
        unknown = [{"v": 2, "kind": "future", "hlc": 1}] if rng.random() < 0.2 else []
        data = encode_segment(entries, unknown)
        roll = rng.random()
        if roll < 0.15:
            return Case(
                lambda: f"valid segment of {len(entries)}", lambda: self.valid(data, entries)
            )
        if roll < 0.45:
            mutated = mutate_bytes(rng, data)
            if rng.random() < 0.2:
                mutated = data + mutated  # a second gzip member, possibly broken
            return Case(lambda: f"gzip bytes {mutated!r}", lambda: self.decode(mutated, None))
        payload = payload_shapes(rng, gzip.decompress(data))
        packed = gzip.compress(payload, compresslevel=1, mtime=0)
        return Case(lambda: f"payload {payload!r}", lambda: self.decode(packed, payload))

    @staticmethod
    def valid(data: bytes, entries: list[Entry]) -> Verdict:
        decoded = decode_segment(data)
        require(decoded.entries == entries, "a valid segment did not decode to its entries")
        require(not decoded.rejected, f"a valid segment had rejected lines: {decoded.rejected}")
        return ACCEPTED

    @staticmethod
    def decode(data: bytes, payload: bytes | None) -> Verdict:
        try:
            decoded = decode_segment(data)
        except CorruptSegment as exc:
            return refused(exc)
        for line in decoded.rejected:
            require(bool(line.reason.strip()), f"line {line.line_no} rejected without a reason")
        if payload is not None:
            lines = sum(1 for line in payload.decode("utf-8").split("\n") if line.strip())
            seen = len(decoded.entries) + len(decoded.rejected) + sum(decoded.skipped.values())
            require(seen == lines, f"{lines} lines, but {seen} decoded, rejected or skipped")
        if decoded.rejected:
            return Verdict(False, decoded.rejected[0].reason)
        return ACCEPTED


class SnapshotReader(Target):
    name = "snapshot"
    memory_limit_mib = 256.0

    def __init__(self, workdir: Path, *, heavy: bool) -> None:
        super().__init__(workdir, heavy=heavy)
        self.backend = DirectoryBackend(workdir / "log")
        clock = HybridLogicalClock(lambda: BASE_MS)
        self.log = Zeitgeist(self.backend, "reader", clock, wall_ms=lambda: BASE_MS)
        rng = random.Random("older snapshot")
        older_hlc = hlc_from_ms(BASE_MS - 10_000)
        self.newest_hlc = hlc_from_ms(BASE_MS)
        self.older_entries = [dated_by(valid_entry(rng), older_hlc) for _ in range(4)]
        self.older_key = snapshot_key(older_hlc, "peer_a")
        self.newest_key = snapshot_key(self.newest_hlc, "peer_b")
        self.backend.write_overwrite(self.older_key, encode_segment(self.older_entries))

    def case(self, rng: random.Random, number: int) -> Case:
        roll = rng.random()
        entries = [valid_entry(rng) for _ in range(rng.randint(0, 5))]
        if roll < 0.2:
            now = BASE_MS + rng.choice((0, 10**6, 10**9, 10**12))
            copies = entries + rng.sample(entries, len(entries) // 2)
            return Case(lambda: f"fold at {now} of {len(copies)}", lambda: self.fold(copies, now))
        if roll < 0.4:
            beat = Heartbeat("peer_a", rng.randrange(HLC_MAX), BASE_MS, "m/384", None, 3)
            data = self.mutated_heartbeat(rng, beat)
            return Case(lambda: f"heartbeat {data!r}", lambda: self.heartbeat(data))
        # What a compactor writes: the older snapshot's entries and later ones, all dated
        # before the snapshot (mutations then break that, or not).
        folded = self.older_entries + [dated_by(e, self.newest_hlc) for e in entries]
        data = encode_segment(folded if rng.random() < 0.8 else entries)
        if rng.random() < 0.8:
            data = (
                mutate_bytes(rng, data)
                if rng.random() < 0.5
                else gzip.compress(payload_shapes(rng, gzip.decompress(data)), compresslevel=1)
            )
        return Case(lambda: f"snapshot bytes {data!r}", lambda: self.latest(data))

    @staticmethod
    def mutated_heartbeat(rng: random.Random, beat: Heartbeat) -> bytes:
        if rng.random() < 0.5:
            return mutate_bytes(rng, beat.to_bytes())
        obj = mutate_object(rng, json.loads(beat.to_bytes()))
        with contextlib.suppress(ValueError):
            return json.dumps(obj).encode("utf-8", "surrogatepass")
        return b"{}"

    def latest(self, data: bytes) -> Verdict:
        self.backend.write_overwrite(self.newest_key, data)
        try:
            expected: Sequence[Entry] | None = decode_segment(data, SNAPSHOT_LIMITS).entries
        except CorruptSegment:
            expected = None
        if expected is not None:
            held = {entry.id for entry in expected}
            lost = [
                e.id
                for e in self.older_entries
                if e.id not in held
                and not isinstance(e, PulseEntry)
                and not (isinstance(e, TombstoneEntry) and e.forget_pulse is not None)
            ]
            if lost or any(entry.hlc > self.newest_hlc for entry in expected):
                expected = None
        found = self.log.latest_snapshot()
        require(found is not None, "no snapshot found although a sound older one exists")
        assert found is not None
        if expected is None:
            require(found.key == self.older_key, f"a refusable newest snapshot gave {found.key}")
            return Verdict(False, "the newest snapshot is refused: fell back to the older one")
        require(
            found.key == self.newest_key, f"a readable newest snapshot was passed over: {found.key}"
        )
        require(found.entries == list(expected), "the snapshot's entries differ from its segment's")
        return ACCEPTED

    @staticmethod
    def heartbeat(data: bytes) -> Verdict:
        try:
            Heartbeat.from_bytes(data)
        except InvalidHeartbeat as exc:
            return refused(exc)
        return ACCEPTED

    @staticmethod
    def fold(entries: list[Entry], now_ms: int) -> Verdict:
        folded = fold_entries(entries, [], now_ms)
        ids = [entry.id for entry in folded.entries]
        require(len(ids) == len(set(ids)), "a fold kept two entries with one id")
        require(folded.entries == sorted(folded.entries, key=entry_order_key), "fold out of order")
        for entry in folded.entries:
            if isinstance(entry, PulseEntry):
                require(not entry.pulse.is_expired(now_ms), "a fold kept an expired pulse")
        return ACCEPTED


PULSE_FIELDS: Final = (
    "strength",
    "sigma",
    "max_hops",
    "k",
    "decay_per_hop",
    "ttl",
    "reason",
    "seed_embedding",
    "origin_peer",
    "index_version",
    "seed_hash",
    "dim",
    "kind",
    "ts",
    "pulse_id",
    "a pulse is",
)
OUTCOME_FIELDS: Final = (
    "reward",
    "decision_hash",
    "reason",
    "observer_peer",
    "cited",
    "peer",
    "chunk_hashes",
    "decision_text",
)


def arbitrary_float(rng: random.Random) -> float:
    value = hostile_number(rng)
    try:
        return float(value)
    except OverflowError:
        return math.inf


def arbitrary_int(rng: random.Random) -> int:
    value = hostile_number(rng)
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else rng.choice((0, 2**63))
    return int(value)


def plausible_float(rng: random.Random, low: float, high: float) -> float:
    return rng.uniform(low, high) if rng.random() < 0.7 else arbitrary_float(rng)


def plausible_int(rng: random.Random, low: int, high: int) -> int:
    return rng.randint(low, high) if rng.random() < 0.7 else arbitrary_int(rng)


class PulseValidation(Target):
    name = "pulse"

    def case(self, rng: random.Random, number: int) -> Case:
        roll = rng.random()
        if roll < 0.45:
            params = {
                "kind": rng.choice(list(PulseKind)),
                "strength": plausible_float(rng, 0, 1.2),
                "sigma": plausible_float(rng, 0, 12),
                "max_hops": plausible_int(rng, 0, 20),
                "k": plausible_int(rng, 0, 70),
                "decay_per_hop": plausible_float(rng, 0, 1),
                "ttl_s": plausible_float(rng, 0, 4e8),
                "reason": hostile_text(rng) if rng.random() < 0.3 else "why",
            }
            return Case(lambda: f"validate_parameters({params!r})", lambda: self.parameters(params))
        if roll < 0.6:
            outcome = Outcome(
                decision_hash=random_hash(rng) if rng.random() < 0.7 else hostile_text(rng),
                reward=plausible_float(rng, -1.2, 1.2),
                observer_peer=rng.choice(PEERS) if rng.random() < 0.7 else hostile_text(rng),
                ts=arbitrary_int(rng),
                reason=hostile_text(rng),
                cited=tuple(
                    random_hash(rng) if rng.random() < 0.8 else hostile_text(rng)
                    for _ in range(rng.choice((0, 1, 3, 1025)))
                ),
            )
            return Case(lambda: f"{outcome!r}", lambda: self.outcome(outcome))
        pulse = valid_pulse(rng, rng.choice(list(PulseKind)), random_hash(rng))
        wire = mutate_object(rng, pulse.to_json()) if rng.random() < 0.8 else pulse.to_json()
        if rng.random() < 0.8:
            with contextlib.suppress(ValueError, TypeError, RecursionError, OverflowError):
                wire["pulse_id"] = pulse_wire_id(wire)
        return Case(lambda: f"SalientPulse.from_json({wire!r})", lambda: self.wire(wire))

    @staticmethod
    def named(exc: Exception, names: Sequence[str]) -> Verdict:
        message = str(exc)
        require(any(name in message for name in names), f"the refusal names no field: {message!r}")
        return refused(exc)

    @staticmethod
    def parameters(params: dict[str, Any]) -> Verdict:
        try:
            validate_parameters(**params)
        except InvalidPulse as exc:
            return PulseValidation.named(exc, PULSE_FIELDS)
        within_bounds(params)
        return ACCEPTED

    @staticmethod
    def outcome(outcome: Outcome) -> Verdict:
        try:
            outcome.validate()
            Attribution.for_decision(
                outcome.observer_peer, outcome.ts, outcome.cited, outcome.reason
            ).validate()
        except InvalidOutcome as exc:
            return PulseValidation.named(exc, OUTCOME_FIELDS)
        require(-1 <= outcome.reward <= 1, f"reward {outcome.reward} accepted")
        return ACCEPTED

    @staticmethod
    def wire(obj: dict[str, Any]) -> Verdict:
        try:
            pulse = SalientPulse.from_json(obj)
            pulse.validate()
        except InvalidPulse as exc:
            return PulseValidation.named(exc, PULSE_FIELDS)
        within_bounds(
            {
                name: getattr(pulse, name)
                for name in ("kind", "strength", "sigma", "max_hops", "k", "decay_per_hop", "ttl_s")
            }
        )
        return ACCEPTED


def within_bounds(params: Mapping[str, Any]) -> None:
    """Every bound of pulses/pulse.py holds for parameters that validated."""
    kind, k, hops = params["kind"], params["k"], params["max_hops"]
    strength, sigma, decay = params["strength"], params["sigma"], params["decay_per_hop"]
    require(1 <= k <= K_MAX and 0 <= hops <= MAX_HOPS_MAX, f"k {k} or max_hops {hops} accepted")
    require(0 < sigma <= SIGMA_MAX and hops <= max_hops_allowed(sigma), f"sigma {sigma} accepted")
    require(decay * k < 1, f"decay_per_hop {decay} * k {k} >= 1 accepted")
    require(0 < params["ttl_s"] <= TTL_MAX_S, f"ttl {params['ttl_s']} accepted")
    if kind is PulseKind.FORGET:
        require(hops == 0, "a forget pulse with hops accepted")
        return
    require(0 <= strength <= STRENGTH_MAX, f"strength {strength} accepted")
    moved = moved_salience_bound(strength=strength, k=k, max_hops=hops, decay_per_hop=decay)
    require(moved <= MOVED_SALIENCE_MAX, f"a pulse that may move {moved} accepted")


def toml_value(value: Any) -> str:
    """`value` as a TOML literal (json's string escapes are TOML's basic strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{"
            + ", ".join(f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in value.items())
            + "}"
        )
    return '""'


def plausible_setting(rng: random.Random, default: Any) -> Any:
    roll = rng.random()
    if roll < 0.4:
        if isinstance(default, bool):
            return not default
        if isinstance(default, int | float):
            return type(default)(default * rng.choice((0, 0.5, 2, -1, 10))) if default else 1
        return default
    if roll < 0.55:
        return rng.choice((10**400, 2**64, -(2**63), 1e308, math.inf, math.nan, 0, -0.0, 5e-324))
    return hostile_value(rng)


class ConfigFiles(Target):
    name = "config"
    memory_limit_mib = 128.0

    def __init__(self, workdir: Path, *, heavy: bool) -> None:
        super().__init__(workdir, heavy=heavy)
        workdir.mkdir(parents=True, exist_ok=True)
        self.path = workdir / "fuzz.toml"
        self.keys = [(setting.name, setting.default) for setting in SETTINGS]
        example = Path(__file__).resolve().parent / "dreamcycle.example.toml"
        self.example = example.read_bytes()
        self.names = [setting.name for setting in SETTINGS] + [setting.env for setting in SETTINGS]

    def case(self, rng: random.Random, number: int) -> Case:
        roll = rng.random()
        env: dict[str, str] = {}
        if roll < 0.2:
            text = mutate_bytes(rng, self.example)
        else:
            text = self.generated(rng).encode("utf-8", "surrogatepass")
        if rng.random() < 0.4:
            for _ in range(rng.randint(1, 3)):
                key, _default = rng.choice(self.keys)
                name = BY_NAME[key].env
                if rng.random() < 0.1:
                    name = defaults.ENV_PREFIX + hostile_text(rng).replace("\0", "").upper()
                value = str(plausible_setting(rng, _default)).replace("\0", "")
                env[name] = value
        return Case(lambda: f"TOML {text!r}, environment {env!r}", lambda: self.load(text, env))

    def generated(self, rng: random.Random) -> str:
        tables: dict[str, list[str]] = {}
        for _ in range(rng.randint(1, 6)):
            key, default = rng.choice(self.keys)
            section, _, leaf = key.rpartition(".")
            value = plausible_setting(rng, default)
            if rng.random() < 0.05:
                leaf = hostile_text(rng) or "x"
            if rng.random() < 0.05:
                section = rng.choice(("nope", section + ".deeper", "peer.id"))
            tables.setdefault(section, []).append(f"{json.dumps(leaf)} = {toml_value(value)}")
        if rng.random() < 0.05:
            tables["cycle"] = ["interval_s = 1979-05-27T07:32:00Z"]
        return "".join(f"[{name}]\n" + "\n".join(lines) + "\n" for name, lines in tables.items())

    def load(self, text: bytes, env: dict[str, str]) -> Verdict:
        self.path.write_bytes(text)
        try:
            load_config(self.path, environ=env)
        except ConfigError as exc:
            message = str(exc)
            named = str(self.path) in message or any(name in message for name in self.names)
            require(named, f"the refusal names no key, variable or file: {message!r}")
            return refused(exc)
        return ACCEPTED


# ---- the command line -----------------------------------------------------------------------


def database_digest(path: Path) -> str:
    """Every row of every table, read with the standard library (not the code under test).

    SQLite's planner statistics (sqlite_stat*) are left out: closing a connection may
    refresh them (PRAGMA optimize), which stores nothing of memory's.
    """
    digest = hashlib.blake2b()
    uri = f"file:{path}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_stat%' ORDER BY name"
            )
        ]
        for table in tables:
            digest.update(table.encode())
            for row in conn.execute(f'SELECT * FROM "{table}" ORDER BY 1'):
                digest.update(repr(row).encode())
    return digest.hexdigest()


def files_state(root: Path, database: Path) -> dict[str, int]:
    """Size of every file but the database and its journal files (their content is compared)."""
    return {
        str(p.relative_to(root)): p.stat().st_size
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith(database.name)
    }


#: Verbs that load the embedding model when their argv is valid: run with valid argv rarely.
MODEL_VERBS: Final = frozenset({("dreamcycle", "recall"), ("pulse-emit", "pulse")})


class CommandLine(Target):
    name = "cli"
    time_limit_s = 120.0
    memory_limit_mib = 1024.0
    #: Share of cases whose argv is left as the valid template (the model loads for some).
    valid_share: ClassVar[float] = 0.1

    def __init__(self, workdir: Path, *, heavy: bool) -> None:
        super().__init__(workdir, heavy=heavy)
        self.data_dir = workdir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config = workdir / "config.toml"
        self.config.write_text(
            f'[peer]\nid = "fuzz"\ndata_dir = {json.dumps(str(self.data_dir))}\n'
            '[metrics]\nlisten = ""\n[api]\nunix_socket = ""\nport = 0\n'
            '[log]\nlevel = "warning"\n',
            encoding="utf-8",
        )
        self.notes = workdir / "notes.jsonl"
        self.notes.write_text(
            "".join(
                json.dumps({"content": f"note {i} about retries and backoff", "kind": "fact"})
                + "\n"
                for i in range(5)
            ),
            encoding="utf-8",
        )
        self.database = self.data_dir / defaults.DATABASE_FILE
        self.saved_logging = (logging.getLogger().handlers[:], logging.getLogger().level)
        code, _out, err = self.invoke(
            "dreamcycle", ["ingest", "--no-embed", "--config", str(self.config), str(self.notes)]
        )
        if code != 0:
            raise RuntimeError(f"cannot set up the CLI target: {err}")

    def close(self) -> None:
        handlers, level = self.saved_logging
        logging.getLogger().handlers[:] = handlers
        logging.getLogger().setLevel(level)

    def templates(self, rng: random.Random) -> list[tuple[str, list[str]]]:
        digest = random_hash(rng)
        return [
            ("dreamcycle", ["status"]),
            ("dreamcycle", ["status", "--json"]),
            ("dreamcycle", ["forgotten", "--limit", "5", "--offset", "0"]),
            ("dreamcycle", ["forgotten", "--revive", digest]),
            ("dreamcycle", ["sweep", "--dry-run", "--percentile", "10", "--show", "3"]),
            ("dreamcycle", ["sweep", "--percentile", "5", "--min-population", "100"]),
            ("dreamcycle", ["recall", "retries", "--top-k", "3", "--min-confidence", "0.5"]),
            ("dreamcycle", ["ingest", "--no-embed", str(self.notes)]),
            ("dreamcycle", ["import", "engram", str(self.notes), "--dry-run"]),
            ("dreamcycle", ["efficacy", "--window-s", "3600", "--json"]),
            ("dreamcycle", ["rebuild"]),
            ("dreamcycle", ["run", "--cycles", "0"]),
            ("dreamcycle", ["run", "--once", "--interval", "-1"]),
            ("dreamcycle", ["mcp"]),
            ("pulse-emit", ["outcome", "--decision", digest, "--reward", "0.5", "--reason", "r"]),
            (
                "pulse-emit",
                [
                    "outcome",
                    "--decision",
                    digest,
                    "--reward",
                    "1",
                    "--reason",
                    "r",
                    "--cited",
                    digest[:12],
                ],
            ),
            ("pulse-emit", ["tombstone", digest, "--reason", "wrong"]),
            (
                "pulse-emit",
                [
                    "pulse",
                    "--text",
                    "retries",
                    "--kind",
                    "reward",
                    "--strength",
                    "0.3",
                    "--k",
                    "3",
                    "--max-hops",
                    "2",
                    "--sigma",
                    "0.3",
                    "--decay-per-hop",
                    "0.3",
                    "--ttl",
                    "60",
                ],
            ),
        ]

    def case(self, rng: random.Random, number: int) -> Case:
        program, argv = rng.choice(self.templates(rng))
        mutated = argv[:] if rng.random() < self.valid_share else self.mutate(rng, argv)
        if (program, mutated[0]) in MODEL_VERBS and mutated == argv and rng.random() < 0.8:
            mutated = self.mutate(rng, argv)  # a valid one loads the model: seconds a case
        if mutated[:1] == ["run"] and not self.refused_run(mutated):
            mutated = ["run", "--cycles", "-1"]  # a valid `run` would start the daemon
        full = [*mutated, "--config", str(self.config)] if rng.random() < 0.95 else mutated
        return Case(lambda: f"{program} {full!r}", lambda: self.check(program, full))

    @staticmethod
    def refused_run(argv: list[str]) -> bool:
        """Whether `dreamcycle run` refuses `argv` for its --cycles or --interval value."""
        for option, parse in (("--cycles", int), ("--interval", float)):
            if option in argv:
                at = argv.index(option)
                try:
                    if parse(argv[at + 1]) <= 0:
                        return True
                except (IndexError, ValueError, OverflowError):
                    return True
        return False

    @staticmethod
    def mutate(rng: random.Random, argv: list[str]) -> list[str]:
        out = argv[:]
        for _ in range(rng.randint(1, 3)):
            op = rng.randrange(7)
            at = rng.randrange(1, len(out)) if len(out) > 1 else 1
            hostile = str(hostile_number(rng)) if rng.random() < 0.5 else hostile_text(rng)
            hostile = hostile.replace("\0", "")[:5000]
            if op <= 2 and len(out) > 1:
                out[at] = hostile
            elif op == 3 and len(out) > 1:
                del out[at]
            elif op == 4:
                out.insert(
                    at,
                    rng.choice(
                        (
                            "--top-k",
                            "--limit",
                            "--reward",
                            "--k",
                            "--bogus",
                            "-k",
                            "--",
                            "--json",
                            "--direct",
                        )
                    ),
                )
            elif op == 5:
                out.insert(at, hostile)
            else:
                out.extend(out[1:at])
        return out

    def invoke(self, program: str, argv: list[str]) -> tuple[int, str, str]:
        entry = dreamcycle_cli.main if program == "dreamcycle" else pulse_emit_cli.main
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code: int | str | None = entry(argv)
            except SystemExit as exc:
                code = exc.code
        return (
            (code if isinstance(code, int) else 0 if code is None else 2),
            out.getvalue(),
            err.getvalue(),
        )

    def state(self) -> tuple[str, dict[str, int]]:
        return database_digest(self.database), files_state(self.data_dir, self.database)

    def check(self, program: str, argv: list[str]) -> Verdict:
        before = self.state()
        code, _out, err = self.invoke(program, argv)
        require("Traceback" not in err, f"a traceback on stderr: {err[-2000:]}")
        require(code in (0, 2, 3), f"exit {code}: {err[-2000:]}")
        if code == 0:
            return ACCEPTED
        require(bool(err.strip()), f"exit {code} without a message")
        after = self.state()
        require(before == after, f"refused (exit {code}: {err.strip()[-300:]}) but state changed")
        return Verdict(False, err.strip())


TARGETS: Final[Mapping[str, type[Target]]] = {
    cls.name: cls
    for cls in (
        EntryCodec,
        SegmentReader,
        SnapshotReader,
        PulseValidation,
        ConfigFiles,
        CommandLine,
    )
}


# ---- running ----------------------------------------------------------------------------------


def run_target(
    cls: type[Target], cases: int, *, seed: int, workdir: Path, heavy: bool = True
) -> TargetReport:
    report = TargetReport(cls.name)
    rng = random.Random(f"{seed}:{cls.name}")
    started = time.perf_counter()
    rss_at_start = _status_kib("VmRSS:")
    target = cls(workdir / cls.name, heavy=heavy)
    try:
        for number in range(cases):
            case = target.case(rng, number)
            rss_before = _reset_peak_rss()
            case_started = time.perf_counter()
            finding: tuple[str, str, str] | None = None
            try:
                with time_limit(cls.time_limit_s):
                    verdict = case.run()
            except Violation as exc:
                finding = ("violation", str(exc), signature_of(exc))
            except CaseTimeout:
                finding = ("hang", f"still running after {cls.time_limit_s:g} s", "hang")
            except Exception as exc:
                finding = ("crash", traceback.format_exc(), signature_of(exc))
            elapsed = time.perf_counter() - case_started
            growth_mib = (_status_kib("VmHWM:") - rss_before) / KIB_PER_MIB
            report.cases += 1
            report.max_case_s = max(report.max_case_s, elapsed)
            report.peak_rss_growth_mib = max(report.peak_rss_growth_mib, growth_mib)
            if finding is None and growth_mib > cls.memory_limit_mib:
                finding = (
                    "memory",
                    f"peak RSS grew {growth_mib:.0f} MiB (limit {cls.memory_limit_mib:g})",
                    "memory",
                )
            if finding is not None:
                kind, detail, signature = finding
                report.findings.append(
                    Finding(cls.name, kind, preview(case.describe()), detail, signature)
                )
            elif verdict.accepted:
                report.accepted += 1
            else:
                report.rejected += 1
    finally:
        target.close()
    report.retained_rss_mib = (_status_kib("VmRSS:") - rss_at_start) / KIB_PER_MIB
    report.seconds = time.perf_counter() - started
    return report


def split_cases(total: int, names: Sequence[str]) -> dict[str, int]:
    """`total` shared by WEIGHTS among `names`, each at least 1."""
    weight = sum(WEIGHTS[name] for name in names)
    return {name: max(1, round(total * WEIGHTS[name] / weight)) for name in names}


COLUMNS: Final = [
    Column("target"),
    Column("cases", "cases run"),
    Column("rejected", "rejected (clear error)"),
    Column("accepted"),
    Column("findings", "crashes/findings"),
    Column("max_case_ms", "max ms/case", ",.1f"),
    Column("peak_rss_growth_mib", "peak RSS growth MiB", ",.1f"),
    Column("seconds", "seconds", ",.1f"),
]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--cases",
        type=int,
        default=DEFAULT_CASES,
        help=f"cases in all, shared among the targets (default {DEFAULT_CASES:,})",
    )
    parser.add_argument(
        "--target",
        choices=sorted(TARGETS),
        action="append",
        help="run only this target (repeatable); default: all",
    )
    parser.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help="the same seed gives the same cases"
    )
    parser.add_argument(
        "--no-heavy",
        action="store_true",
        help="skip the segment target's three heavy shapes (256 MiB each)",
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"JSON results (default {DEFAULT_OUT})"
    )
    args = parser.parse_args(argv)
    if args.cases < 1:
        parser.error(f"--cases must be >= 1, got {args.cases}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    names = args.target or list(TARGETS)
    shares = split_cases(args.cases, names)
    machine = describe_machine(("hypothesis", "apsw"))
    print(machine_summary(machine))
    reports: list[TargetReport] = []
    with tempfile.TemporaryDirectory(prefix="dreamcycle-fuzz-") as workdir:
        for name in names:
            reports.append(
                run_target(
                    TARGETS[name],
                    shares[name],
                    seed=args.seed,
                    workdir=Path(workdir),
                    heavy=not args.no_heavy,
                )
            )
            print(
                f"{name}: {reports[-1].cases:,} cases, {reports[-1].crashes} findings",
                file=sys.stderr,
            )
    total = TargetReport("total")
    for report in reports:
        total.cases += report.cases
        total.rejected += report.rejected
        total.accepted += report.accepted
        total.findings += report.findings
        total.max_case_s = max(total.max_case_s, report.max_case_s)
        total.peak_rss_growth_mib = max(total.peak_rss_growth_mib, report.peak_rss_growth_mib)
        total.seconds += report.seconds
    print_table([r.row() for r in [*reports, total]], COLUMNS)
    by_signature: dict[str, list[Finding]] = {}
    for finding in total.findings:
        by_signature.setdefault(
            f"{finding.target}: {finding.kind}: {finding.signature}", []
        ).append(finding)
    for signature, found in by_signature.items():
        print(
            f"\n{signature} ({len(found)} cases); first input: {found[0].input}\n{found[0].detail}"
        )
    payload = {
        "machine": machine,
        "seed": args.seed,
        "cases": args.cases,
        "heavy": not args.no_heavy,
        "targets": [{**r.row(), "retained_rss_mib": r.retained_rss_mib} for r in reports],
        "findings": [dataclasses.asdict(f) for f in total.findings],
    }
    print(f"\nresults written to {write_json(args.out, payload)}")
    return 1 if total.findings else 0


if __name__ == "__main__":
    sys.exit(main())
