"""Bounds on pulses beyond convergence: the measured attack, the moved-salience bound over real
propagation, the budget per origin, outcome and attribution sizes, and the refusals of
`pulse-emit`, the config and the API.

One file: each bound is checked at every place that enforces it (the pulse, propagation, the
budget, the config, pulse-emit, and the API of one daemon started per module), so no
enforcement of it can drift unseen.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api import edit_models
from dreamcycle.daemon.cli import pulse_emit as pulse_emit_cli
from dreamcycle.daemon.config import ConfigError, load_config
from dreamcycle.pulses.budget import (
    InvalidBudget,
    WindowState,
    admit_within_budget,
    cost_units,
    to_units,
)
from dreamcycle.pulses.constants import (
    ATTRIBUTION_MAX_CHUNKS,
    DECISION_TEXT_MAX_CHARS,
    K_MAX,
    MAX_HOPS_MAX,
    MOVED_SALIENCE_MAX,
    OUTCOME_DECAY_PER_HOP,
    OUTCOME_K,
    OUTCOME_MAX_HOPS,
    OUTCOME_SIGMA,
    REASON_MAX_CHARS,
    SALIENCE_STEP,
    SIGMA_MAX,
    STRENGTH_MAX,
    TTL_MAX_S,
)
from dreamcycle.pulses.credit import assign_credit
from dreamcycle.pulses.memory import InMemorySalience
from dreamcycle.pulses.outcome import Attribution, InvalidOutcome, Outcome, outcome_to_pulses
from dreamcycle.pulses.propagate import propagate, total_delta_bound
from dreamcycle.pulses.pulse import InvalidPulse, PulseKind, SalientPulse, max_hops_allowed
from tests.api_helpers import TOKEN, running_api
from tests.bruteforce import BruteForceIndex
from tests.daemon_helpers import Peer, run_in_process
from tests.test_pulses_pulse import make_pulse

EXIT_USAGE = 2
#: The measured attack: it passes the convergence invariants (0.0039 * 255 < 1, and 23 hops
#: is the deepest sigma 0.3 allows).
ATTACK: dict[str, Any] = {
    "kind": PulseKind.DECAY,
    "strength": 1e308,
    "k": 255,
    "max_hops": 23,
    "decay_per_hop": 0.0039,
    "sigma": 0.3,
}
ATTACK_FLAGS = (
    "--strength", "1e308", "--k", "255", "--max-hops", "23", "--decay-per-hop", "0.0039",
    "--sigma", "0.3",
)  # fmt: skip
#: Within every per-field limit, but a chain of 16 near-lossless hops: 14.7 moved.
CHAIN: dict[str, Any] = {"strength": 1.0, "k": 1, "max_hops": 16, "decay_per_hop": 0.99}
PROPERTY_SETTINGS = settings(max_examples=120, deadline=None)


def clustered_index(
    rng: np.random.Generator, size: int, dim: int = 8
) -> tuple[BruteForceIndex, npt.NDArray[np.float64]]:
    centres = rng.normal(size=(4, dim))
    index = BruteForceIndex(dim=dim)
    for label in range(size):
        index.add(label, centres[label % 4] + 0.4 * rng.normal(size=dim))
    return index, centres


# ---- the attack ---------------------------------------------------------------------------


def test_the_measured_attack_zeroes_its_reach_and_is_rejected_naming_strength() -> None:
    rng = np.random.default_rng(77)
    index, centres = clustered_index(rng, 77)
    attack = make_pulse(centres[0], **ATTACK)
    assert 0.0039 * 255 < 1
    assert max_hops_allowed(0.3) >= 23

    state = InMemorySalience({label: 0.6 for label in range(77)})
    propagate(attack, index, state)  # what a peer without the bounds did
    zeroed = sum(state.salience(label) == 0.0 for label in range(77))
    assert zeroed >= 76

    with pytest.raises(InvalidPulse, match=r"^strength 1e\+308 exceeds the limit of 1$"):
        attack.validate()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({**ATTACK, "strength": 1.0}, r"^k 255 exceeds the limit of 64$"),
        ({**ATTACK, "strength": 1.0, "k": 1}, r"^max_hops 23 exceeds the limit of 16$"),
        ({"strength": 1.0 + 1e-9}, r"^strength 1 exceeds the limit of 1$"),
        ({"sigma": 10.5, "max_hops": 0}, r"^sigma 10.5 exceeds the limit of 10$"),
        ({"ttl_s": TTL_MAX_S * 2}, r"^ttl 6\.3072e\+08 s exceeds the limit of 3\.1536e\+08 s$"),
        (CHAIN, r"may move 14\.7 salience in all, more than the limit of 4 "),
        ({"reason": "r" * (REASON_MAX_CHARS + 1)}, r"^reason has 1001 characters, more than"),
        ({"origin_peer": "p" * 129}, r"^origin_peer has 129 characters, more than the limit"),
        ({"index_version": "v" * 257}, r"^index_version has 257 characters, more than the"),
        ({"seed_embedding": np.ones(4097)}, r"^seed_embedding has 4097 dimensions, more than"),
    ],
)
def test_each_bound_is_named_with_its_limit(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidPulse, match=message):
        make_pulse(**overrides).validate()


def test_a_seed_hash_must_be_a_content_hash() -> None:
    pulse = replace(make_pulse(), seed_hash="x" * 10_000).with_id()
    with pytest.raises(InvalidPulse, match=r"seed_hash must be 64 lowercase hex digits, got 'x"):
        pulse.validate()
    replace(make_pulse(), seed_hash="0a" * 32).with_id().validate()


def test_a_forget_pulse_keeps_its_infinite_strength_and_moves_nothing() -> None:
    forget = make_pulse(kind=PulseKind.FORGET, strength=math.inf, max_hops=0, k=1, sigma=1.0)
    forget.validate()
    assert forget.moved_salience_bound() == 0.0


# ---- every pulse the project emits sits well inside ---------------------------------------


def outcome_pulses(reward: float, chunks: int) -> list[SalientPulse]:
    rng = np.random.default_rng(5)
    embeddings = {f"{n:064x}": rng.normal(size=8).astype(np.float32) for n in range(chunks)}
    attribution = Attribution.for_decision("peer_a", 1 << 20, embeddings, "ship it")
    outcome = Outcome(attribution.decision_hash, reward, "peer_b", 1 << 21, "deploy/retries")
    credits = assign_credit(list(embeddings), list(embeddings), reward)
    return outcome_to_pulses(
        outcome, attribution, embeddings.get, index_version="m/8", credits=credits
    )


def test_the_projects_own_pulses_are_well_inside_the_moved_bound() -> None:
    strongest = [*outcome_pulses(1.0, 100), *outcome_pulses(-1.0, 100)]
    assert len(strongest) == 200
    feedback = make_pulse(
        strength=STRENGTH_MAX,
        sigma=OUTCOME_SIGMA,
        k=OUTCOME_K,
        max_hops=OUTCOME_MAX_HOPS,
        decay_per_hop=OUTCOME_DECAY_PER_HOP,
    )
    emit_default = make_pulse(
        strength=defaults.PULSE_STRENGTH,
        sigma=defaults.PULSE_SIGMA,
        k=defaults.PULSE_K,
        max_hops=defaults.PULSE_MAX_HOPS,
        decay_per_hop=defaults.PULSE_DECAY_PER_HOP,
        ttl_s=defaults.PULSE_TTL_S,
    )
    for pulse in [*strongest, feedback, emit_default]:
        pulse.validate()
        assert pulse.moved_salience_bound() <= MOVED_SALIENCE_MAX / 2
    assert max(p.moved_salience_bound() for p in strongest) == pytest.approx(1.71)


@pytest.mark.parametrize(
    "extreme",
    [
        {"strength": STRENGTH_MAX},
        {"sigma": SIGMA_MAX, "max_hops": 0},
        {"k": K_MAX, "decay_per_hop": 0.3 / K_MAX},
        {"max_hops": MAX_HOPS_MAX, "k": 1, "decay_per_hop": 0.1},
        {"ttl_s": TTL_MAX_S},
        {"reason": "r" * REASON_MAX_CHARS},
    ],
)
def test_the_apis_documented_extremes_validate(extreme: dict[str, Any]) -> None:
    fields = {name: value for name, value in extreme.items() if name != "reason"}
    edit_models.PulseRequest(text="t", **fields)
    make_pulse(**extreme).validate()


# ---- the bound holds in real propagation --------------------------------------------------


@st.composite
def parameters(draw: st.DrawFn) -> dict[str, Any]:
    """Pulse parameters around and past every limit, so both sides of each are drawn."""
    k = draw(st.integers(1, K_MAX + 8))
    return {
        "kind": draw(st.sampled_from([PulseKind.REWARD, PulseKind.DECAY])),
        "strength": draw(st.floats(0.0, 1.3)),
        "k": k,
        "decay_per_hop": draw(st.floats(0.0, 1.05)) / k,
        "max_hops": draw(st.integers(0, MAX_HOPS_MAX + 3)),
        "sigma": draw(st.floats(0.05, SIGMA_MAX + 1)),
    }


FIELD_NAMES = ("strength", "k", "max_hops", "sigma", "decay_per_hop")


@given(parameters(), st.integers(0, 2**32 - 1), st.integers(10, 120))
@PROPERTY_SETTINGS
def test_a_valid_pulse_moves_at_most_its_bound_and_the_limit(
    params: dict[str, Any], seed: int, size: int
) -> None:
    rng = np.random.default_rng(seed)
    index, centres = clustered_index(rng, size)
    pulse = make_pulse(centres[int(rng.integers(4))] + 0.2 * rng.normal(size=8), **params)
    try:
        pulse.validate()
    except InvalidPulse as exc:
        assert str(exc).startswith(FIELD_NAMES), exc
        return
    state = InMemorySalience({label: float(rng.uniform()) for label in range(size)})
    result = propagate(pulse, index, state)
    moved = sum(abs(change.after - change.before) for change in result.changes)
    bound = pulse.moved_salience_bound()
    assert bound == pytest.approx(total_delta_bound(pulse), rel=1e-12)
    # A stored value not yet on the salience grid is first cut to it: up to a step.
    rounding = len(result.changes) * SALIENCE_STEP
    assert moved <= bound * (1 + 1e-12) + rounding + 1e-15
    assert bound <= MOVED_SALIENCE_MAX


# ---- the budget per origin ----------------------------------------------------------------


def pulse_from(origin: str, strength: float, nonce: int) -> SalientPulse:
    """An outcome-shaped pulse moving at most 1.71 * strength."""
    return make_pulse(
        strength=strength,
        sigma=OUTCOME_SIGMA,
        k=OUTCOME_K,
        max_hops=OUTCOME_MAX_HOPS,
        decay_per_hop=OUTCOME_DECAY_PER_HOP,
        origin_peer=origin,
        ts=nonce,
    )


def test_the_budget_admits_in_order_and_refuses_the_rest_of_that_origin() -> None:
    a = [pulse_from("a", 1.0, n) for n in range(4)]  # 1.71 each
    b = [pulse_from("b", 0.5, n) for n in range(4)]
    small_after = pulse_from("a", 0.01, 9)
    forget = make_pulse(kind=PulseKind.FORGET, strength=math.inf, max_hops=0, origin_peer="a")
    order = [a[0], b[0], a[1], b[1], a[2], small_after, forget, b[2], a[3], b[3]]
    verdict = admit_within_budget(order, 4.0)

    assert verdict.admitted == (a[0], b[0], a[1], b[1], b[2], b[3])
    assert [over.pulse for over in verdict.rejected] == [a[2], small_after, forget, a[3]]
    first = verdict.rejected[0].reason
    assert first.startswith("over budget: origin a may move 4 salience per window; 3.42 was")
    assert "which may move 1.71" in first
    assert f"at pulse {a[2].pulse_id}" in verdict.rejected[1].reason
    assert verdict.spent == pytest.approx({"a": 3.42, "b": 4 * 0.855})


def test_exempt_origins_and_bad_budgets() -> None:
    own = [pulse_from("self", 1.0, n) for n in range(10)]
    assert admit_within_budget(own, 1.0, exempt={"self"}).admitted == tuple(own)
    for budget in (0.0, -1.0, math.nan):
        with pytest.raises(InvalidBudget, match="must be > 0"):
            admit_within_budget(own, budget)


@given(
    st.lists(st.tuples(st.sampled_from("abc"), st.floats(0.0, 1.0)), max_size=40),
    st.floats(0.5, 20.0),
)
@PROPERTY_SETTINGS
def test_each_origin_spends_at_most_its_budget_and_refusals_end_its_cycle(
    drawn: list[tuple[str, float]], budget: float
) -> None:
    pulses = [pulse_from(origin, strength, n) for n, (origin, strength) in enumerate(drawn)]
    verdict = admit_within_budget(pulses, budget)
    admitted_ids = {p.pulse_id for p in verdict.admitted}
    assert len(verdict.admitted) + len(verdict.rejected) == len(pulses)
    for origin in "abc":
        mine = [p for p in pulses if p.origin_peer == origin]
        passed = [p.pulse_id in admitted_ids for p in mine]
        assert passed == sorted(passed, reverse=True)  # admitted, then refused
        # Counted in whole units, exact in any grouping (a billionth of salience each).
        spent = sum(cost_units(p) or 0 for p in mine if p.pulse_id in admitted_ids)
        assert spent <= to_units(budget)
        assert verdict.windows.get(origin, WindowState()).spent_units == spent
        assert verdict.spent.get(origin, 0.0) == pytest.approx(spent / 1e9)
        if False in passed:  # refused only when the next one would have gone over
            first_refused = mine[passed.index(False)]
            assert spent + (cost_units(first_refused) or 0) > to_units(budget)


# ---- outcomes and attributions ------------------------------------------------------------


CHUNK = "ab" * 32


def test_outcome_cited_reason_and_peer_are_bounded() -> None:
    base = Outcome("cd" * 32, 0.5, "peer_b", 1, "r", cited=(CHUNK,))
    base.validate()
    too_many = tuple(f"{n:064x}" for n in range(ATTRIBUTION_MAX_CHUNKS + 1))
    cases: list[tuple[dict[str, Any], str]] = [
        ({"cited": too_many}, r"^outcome\.cited lists 1025 chunks, more than the limit of 1024$"),
        ({"cited": ("zz",)}, r"^outcome\.cited\[0\] must be a chunk hash"),
        ({"reason": "r" * 1001}, r"^outcome\.reason has 1001 characters, more than the limit"),
        ({"observer_peer": "p" * 129}, r"^outcome\.observer_peer has 129 characters"),
    ]
    for change, message in cases:
        with pytest.raises(InvalidOutcome, match=message):
            replace(base, **change).validate()


def test_attribution_chunks_and_text_are_bounded() -> None:
    def attribution(chunks: int = 3, text: str = "t", peer: str = "p") -> Attribution:
        return Attribution.for_decision(peer, 1, [f"{n:064x}" for n in range(chunks)], text)

    attribution(ATTRIBUTION_MAX_CHUNKS, "t" * DECISION_TEXT_MAX_CHARS).validate()
    with pytest.raises(InvalidOutcome, match=r"chunk_hashes lists 1025 chunks, more than"):
        attribution(ATTRIBUTION_MAX_CHUNKS + 1).validate()
    with pytest.raises(InvalidOutcome, match=r"decision_text has 262145 characters, more than"):
        attribution(text="t" * (DECISION_TEXT_MAX_CHARS + 1)).validate()
    with pytest.raises(InvalidOutcome, match=r"attribution\.peer has 129 characters"):
        attribution(peer="p" * 129).validate()
    with pytest.raises(InvalidOutcome, match=r"chunk_hashes\[0\] must be a chunk hash"):
        replace(attribution(), chunk_hashes=("short",)).validate()


# ---- the config ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "key"),
    [
        ("DREAMCYCLE_PULSES_STRENGTH", "2", "pulses.strength makes pulses no peer accepts"),
        ("DREAMCYCLE_PULSES_TTL_S", "1e12", "pulses.ttl_s makes pulses no peer accepts"),
        ("DREAMCYCLE_PULSES_ORIGIN_BUDGET", "0", "pulses.origin_budget must be > 0"),
    ],
)
def test_the_config_refuses_out_of_bound_pulse_defaults(
    variable: str, value: str, key: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(None, environ={variable: value})
    assert key in str(caught.value)
    assert f"environment variable {variable}" in str(caught.value)


# ---- pulse-emit and the API ---------------------------------------------------------------

TEXT = ("--text", "retry S3 writes with backoff", "--kind", "decay")
ATTACK_REFUSAL = "argument --strength: must be >= 0, <= 1, got 1e308"


def test_pulse_emit_refuses_out_of_bound_pulses_naming_field_and_limit(tmp_path: Path) -> None:
    peer = Peer(tmp_path / "data", "bounds", tmp_path / "zeitgeist")
    refused = [
        # Each option's own range is refused as the arguments are parsed, naming the option.
        ((*TEXT, *ATTACK_FLAGS), f"error: {ATTACK_REFUSAL}\n"),
        ((*TEXT, "--k", "255", "--decay-per-hop", "0.0039"), "argument --k: must be >= 1, <= 64"),
        ((*TEXT, "--strength", "1", "--k", "1", "--max-hops", "16", "--decay-per-hop", "0.99"),
         "salience in all, more than the limit of 4"),
        ((*TEXT, "--reason", "r" * 1001), "reason has 1001 characters, more than the limit"),
    ]  # fmt: skip
    for args, message in refused:
        ran = run_in_process(pulse_emit_cli.main, ["pulse", *args, *peer.options()])
        assert ran.code == EXIT_USAGE, ran
        assert message in ran.err, ran.err
        assert "Traceback" not in ran.err
    assert not peer.database_path.exists()  # refused before anything was opened


@dataclass
class Served:
    unix: httpx.Client
    peer: Peer


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("bounds-api")
    peer = Peer(root / "data", "bounds_api", root / "zeitgeist")
    with running_api(peer) as daemon:
        transport = httpx.HTTPTransport(uds=daemon.socket_path)
        with httpx.Client(transport=transport, base_url="http://dreamcycle") as unix:
            yield Served(unix, peer)


def refusal(served: Served, path: str, body: dict[str, Any]) -> str:
    response = served.unix.post(path, json=body, headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 422, (path, body, response.text)
    return response.text


def test_the_api_refuses_the_attack_and_the_chain_with_422(served: Served) -> None:
    queued_before = served.peer.scalar("SELECT count(*) FROM outbox")
    pulse = {"text": "retry S3 writes", "kind": "decay"}
    attack = {**pulse, **{k: v for k, v in ATTACK.items() if k != "kind"}}
    answer = refusal(served, "/v1/pulses", attack)
    assert "strength" in answer and "must be at most 1" in answer
    answer = refusal(served, "/v1/pulses", {**pulse, **CHAIN})
    assert "more than the limit of 4" in answer
    answer = refusal(served, "/v1/pulses", {**pulse, "reason": "r" * 1001})
    assert "reason" in answer and "1000 characters" in answer
    for verb in ("reinforce", "penalize"):
        answer = refusal(
            served, f"/v1/memories/{CHUNK}/{verb}", {"reason": "why", "strength": 1e308}
        )
        assert "strength" in answer and "must be at most 1" in answer
    assert served.peer.scalar("SELECT count(*) FROM outbox") == queued_before


def test_pulse_emit_through_the_daemon_refuses_alike(served: Served) -> None:
    result = served.peer.pulse_emit("pulse", *TEXT, *ATTACK_FLAGS, expect=EXIT_USAGE)
    assert result.stderr.splitlines()[-1] == f"pulse-emit pulse: error: {ATTACK_REFUSAL}"
