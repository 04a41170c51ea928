"""Protocol constants: pulse bounds and outcome parameters. Operational defaults live in daemon/defaults/."""

from typing import Final

#: Smallest salience delta worth propagating; bounds max_hops.
EPSILON: Final = 1e-3
#: Narrowest kernel accepted. A width far below any real cosine distance reaches nothing,
#: and at ~1e-160 the kernel's 2 * sigma**2 underflows to zero.
SIGMA_MIN: Final = 1e-6
#: Salience of a new chunk, and the cap that Reward never exceeds.
SALIENCE_MAX: Final = 1.0
#: Lowest possible salience of an unpinned chunk.
SALIENCE_MIN: Final = 0.0
#: A pulse moves salience in whole steps of this size (2 ** -40, about 1e-12): a sum of
#: such steps below 2 ** 13 is exact in a float64, so changes commute, and peers applying
#: the same pulses in different orders store the same salience bit for bit while no clamp
#: is reached.
SALIENCE_STEP: Final = 2.0**-40

#: Outcome -> pulse parameters: tight credit assignment.
OUTCOME_SIGMA: Final = 0.15
OUTCOME_MAX_HOPS: Final = 2
OUTCOME_K: Final = 3
OUTCOME_DECAY_PER_HOP: Final = 0.3
#: How long a pulse derived from an outcome stays collectable, in seconds (7 days).
OUTCOME_PULSE_TTL_S: Final = 7 * 24 * 3600

#: Bytes of blake3 kept for a pulse_id (128 bits).
PULSE_ID_BYTES: Final = 16

# ---- bounds beyond the convergence invariants (pulses/pulse.py explains each choice) ----

#: Largest pulse strength: a reward magnitude, as outcomes and feedback produce.
STRENGTH_MAX: Final = 1.0
#: Most neighbours a BFS node may fan out to.
K_MAX: Final = 64
#: Deepest BFS a pulse may ask for, whatever its width.
MAX_HOPS_MAX: Final = 16
#: Widest kernel accepted, in cosine-distance units (distances never exceed 2).
SIGMA_MAX: Final = 10.0
#: Longest time to live of a pulse, in seconds (ten years).
TTL_MAX_S: Final = 10 * 365 * 86_400.0
#: Most salience one pulse may move in the worst case, summed over every chunk it reaches
#: (`moved_salience_bound`); in units of one chunk's whole salience range.
MOVED_SALIENCE_MAX: Final = 4.0
#: Longest reason of a pulse or an outcome, in characters.
REASON_MAX_CHARS: Final = 1_000
#: Longest text recall embeds and searches, in characters: a query, a task, a decision's
#: text as a client gives it, a pulse's text. Every surface refuses a longer one alike.
QUERY_MAX_CHARS: Final = 100_000
#: Longest peer id (origin, observer, decision maker) on the wire, in characters.
PEER_ID_MAX_CHARS: Final = 128
#: Longest index version (model id and width) on the wire, in characters.
INDEX_VERSION_MAX_CHARS: Final = 256
#: Widest seed embedding accepted.
EMBEDDING_DIM_MAX: Final = 4_096
#: Most chunks one decision's attribution may list (and so an outcome may cite).
ATTRIBUTION_MAX_CHUNKS: Final = 1_024
#: Longest decision text of an attribution, in characters.
DECISION_TEXT_MAX_CHARS: Final = 262_144
