"""Hostile input, a few thousand cases: the targets of scripts/fuzz.py, and what they found.

Every finding is fixed and kept below as a regression; any crash, hang, memory blow-up or
state change fails here.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dreamcycle.daemon.config import ConfigError, load_config
from dreamcycle.pulses.pulse import InvalidPulse, PulseKind, SalientPulse
from dreamcycle.zeitgeist.entries import (
    ENTRY_TYPES,
    CorruptSegment,
    InvalidEntry,
    Refusal,
    canonical_json,
    decode_entry,
    decode_segment,
    encode_entry,
    encode_segment,
)
from dreamcycle.zeitgeist.log import MAX_HEARTBEAT_BYTES, Heartbeat, InvalidHeartbeat
from scripts.fuzz import (
    TARGETS,
    CommandLine,
    _reset_peak_rss,
    _status_kib,
    pulse_wire_id,
    run_target,
    valid_entry,
    valid_pulse,
)

#: Cases per target here; the CLI's cost a process start's worth of work each.
CASES = {
    "entry_codec": 1500,
    "segment": 400,
    "snapshot": 300,
    "pulse": 1500,
    "config": 300,
    "cli": 120,
}
DEEP = 100_000


def digest_id(obj: dict[str, Any]) -> dict[str, Any]:
    import blake3

    body = {k: v for k, v in obj.items() if k != "id"}
    return {**body, "id": blake3.blake3(canonical_json(body)).digest(16).hex()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fuzz_target_finds_nothing_new(name: str, tmp_path: Path) -> None:
    report = run_target(TARGETS[name], CASES[name], seed=1, workdir=tmp_path, heavy=False)
    found = report.findings
    assert not found, "\n\n".join(f"{f.kind}: {f.input}\n{f.detail}" for f in found[:3])
    assert report.cases == CASES[name]
    # Both ways out are exercised, or the target tests nothing.
    assert report.rejected > report.cases // 10
    assert report.accepted > 0


# ---- round trips, by hypothesis --------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(ENTRY_TYPES)), st.randoms(use_true_random=False))
def test_every_valid_entry_round_trips_exactly(kind: str, rng: Any) -> None:
    entry = valid_entry(rng, kind)
    assert decode_entry(encode_entry(entry)) == entry
    assert decode_segment(encode_segment([entry])).entries == [entry]


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["strength", "sigma", "decay_per_hop", "ttl_s", "dim", "k", "max_hops", "ts"]),
    st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(min_value=-(10**400), max_value=10**400),
        st.text(max_size=20),
        st.none(),
        st.lists(st.integers(), max_size=2),
    ),
)
def test_a_received_pulse_is_a_pulse_or_invalid_pulse_naming_the_field(
    field: str, value: Any
) -> None:
    import random

    wire = valid_pulse(random.Random(field)).to_json()
    wire[field] = value
    try:
        SalientPulse.from_json(wire).validate()
    except InvalidPulse as exc:
        assert field.removesuffix("_s") in str(exc) or "pulse_id" in str(exc)


# ---- regressions of what the fuzzing found and this change fixed -------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [("sigma", 10**400), ("ttl_s", -(10**400)), ("dim", math.inf), ("decay_per_hop", [1])],
)
def test_from_json_refuses_numbers_no_float_holds_naming_the_field(field: str, value: Any) -> None:
    import random

    wire = valid_pulse(random.Random(0)).to_json()
    wire[field] = value
    with pytest.raises(InvalidPulse, match=field):
        SalientPulse.from_json(wire)


def test_a_tombstone_with_a_huge_forget_pulse_field_is_an_invalid_entry() -> None:
    import random

    seed = 0
    while (
        json.loads(valid_entry(random.Random(seed), "tombstone").wire_bytes)["forget_pulse"] is None
    ):
        seed += 1
    obj = json.loads(valid_entry(random.Random(seed), "tombstone").wire_bytes)
    obj["forget_pulse"]["sigma"] = 10**400
    with pytest.raises(InvalidEntry, match="sigma"):
        decode_entry(digest_id(obj))


@pytest.mark.parametrize(
    ("toml", "environ", "named"),
    [
        ("[cycle]\ninterval_s = 1" + "0" * 400 + "\n", {}, "cycle.interval_s"),
        ("[index]\nm = 1" + "0" * 5000 + "\n", {}, "not valid TOML"),
        (None, {"DREAMCYCLE_METRICS_LISTEN": "host:²"}, "metrics.listen"),
        (None, {"DREAMCYCLE_API_TOKEN_FILE": "a\0b"}, "api.token_file"),
        (None, {"DREAMCYCLE_CONFIG": "a\0b"}, "config file"),
    ],
)
def test_config_refuses_what_used_to_crash_naming_the_key(
    tmp_path: Path, toml: str | None, environ: dict[str, str], named: str
) -> None:
    path = None
    if toml is not None:
        path = tmp_path / "bad.toml"
        path.write_text(toml, encoding="utf-8")
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        load_config(path, environ=environ)


def test_config_that_is_not_utf8_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'[peer]\nid = "caf\xe9"\n')
    with pytest.raises(ConfigError, match=r"latin1\.toml"):
        load_config(path, environ={})


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> CommandLine:
    return CommandLine(tmp_path_factory.mktemp("cli"), heavy=False)


@pytest.mark.parametrize(
    "argv",
    [
        ["forgotten", "--limit", str(2**64)],
        ["forgotten", "--offset", str(2**63)],
        ["import", "engram", "x" * 5000],
        ["efficacy", "--window-s", "inf"],
    ],
)
def test_commands_refuse_what_used_to_fail_with_exit_2(cli: CommandLine, argv: list[str]) -> None:
    before = cli.state()
    code, _out, err = cli.invoke("dreamcycle", [*argv, "--config", str(cli.config)])
    assert code == 2, err
    # One error line: ours, or argparse's (after its usage) for an option out of range.
    assert [line for line in err.splitlines() if "error: " in line] == [err.splitlines()[-1]]
    assert "Traceback" not in err
    assert cli.state() == before


def test_efficacy_over_a_window_longer_than_the_epoch_answers(cli: CommandLine) -> None:
    code, out, err = cli.invoke(
        "dreamcycle", ["efficacy", "--window-s", "1e15", "--json", "--config", str(cli.config)]
    )
    assert code == 0, err
    assert json.loads(out)


# ---- what the fuzzing found in the zeitgeist codec, fixed ---------------------------------------


def test_an_outcome_with_a_reward_no_float_holds_is_an_invalid_entry() -> None:
    import random

    obj = json.loads(valid_entry(random.Random(0), "outcome").wire_bytes)
    obj["reward"] = 10**400
    line = json.dumps(digest_id(obj)).encode() + b"\n"
    (rejected,) = decode_segment(gzip.compress(line)).rejected
    assert "reward" in rejected.reason and "finite" in rejected.reason


def test_a_deeply_nested_line_is_rejected_and_the_rest_decodes() -> None:
    import random

    entry = valid_entry(random.Random(0))
    payload = b"[" * DEEP + b"]" * DEEP + b"\n" + entry.wire_bytes + b"\n"
    decoded = decode_segment(gzip.compress(payload))
    assert decoded.entries == [entry]
    (rejected,) = decoded.rejected
    assert rejected.line_no == 1 and "nested too deeply" in rejected.reason


def test_a_deeply_nested_heartbeat_is_an_invalid_heartbeat() -> None:
    deep = MAX_HEARTBEAT_BYTES // 4  # within the size limit, far beyond the parser's depth
    with pytest.raises(InvalidHeartbeat, match="nested too deeply"):
        Heartbeat.from_bytes(b"[" * deep + b"]" * deep)
    with pytest.raises(InvalidHeartbeat, match="more than the limit"):
        Heartbeat.from_bytes(b"[" * DEEP + b"]" * DEEP)


def test_a_segment_of_newlines_is_refused_at_its_line_limit_in_bounded_memory() -> None:
    size = 16 * 1024 * 1024
    data = gzip.compress(b"\n" * size)
    before = _reset_peak_rss()
    with pytest.raises(CorruptSegment, match="lines") as refused:
        decode_segment(data)
    growth = (_status_kib("VmHWM:") - before) * 1024
    assert refused.value.refusal is Refusal.SEGMENT_TOO_MANY_LINES
    assert growth <= size // 4, f"peak RSS grew {growth / size:.2f} times the payload"


def test_a_forget_pulse_with_an_infinite_field_is_a_rejected_line() -> None:
    import random

    seed = 0
    while (
        json.loads(valid_entry(random.Random(seed), "tombstone").wire_bytes)["forget_pulse"] is None
    ):
        seed += 1
    obj = json.loads(valid_entry(random.Random(seed), "tombstone").wire_bytes)
    obj["forget_pulse"]["decay_per_hop"] = -math.inf
    obj["forget_pulse"]["pulse_id"] = pulse_wire_id(obj["forget_pulse"])
    line = json.dumps(obj).encode() + b"\n"  # json writes -Infinity, as a hostile peer may
    (rejected,) = decode_segment(gzip.compress(line)).rejected
    assert "-Infinity" in rejected.reason
    with pytest.raises(InvalidEntry, match="decay_per_hop"):
        decode_entry(obj)  # the same object, reached without the line parser


def test_each_pulse_kind_validates_its_own_defaults() -> None:
    import random

    for kind in PulseKind:
        valid_pulse(random.Random(kind.value), kind, "0" * 64).validate()


def test_a_pulse_entry_with_an_infinite_field_is_an_invalid_entry() -> None:
    import random

    obj = json.loads(valid_entry(random.Random(0), "salience_pulse").wire_bytes)
    obj["pulse"]["decay_per_hop"] = -math.inf
    obj["pulse"]["pulse_id"] = obj["id"] = pulse_wire_id(obj["pulse"])
    with pytest.raises(InvalidEntry, match="decay_per_hop"):
        decode_entry(obj)
