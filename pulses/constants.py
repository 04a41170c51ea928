"""Protocol constants (seed sections 4-7). Operational defaults live in daemon/defaults.py."""

from typing import Final

#: Smallest salience delta worth propagating; bounds max_hops (seed section 4.2).
EPSILON: Final = 1e-3
#: Narrowest kernel accepted. A width far below any real cosine distance reaches nothing,
#: and at ~1e-160 the kernel's 2 * sigma**2 underflows to zero.
SIGMA_MIN: Final = 1e-6
#: Salience of a new chunk, and the cap that Reward never exceeds.
SALIENCE_MAX: Final = 1.0
#: Lowest possible salience of an unpinned chunk.
SALIENCE_MIN: Final = 0.0

#: Outcome -> pulse parameters (seed section 7.1): tight credit assignment.
OUTCOME_SIGMA: Final = 0.15
OUTCOME_MAX_HOPS: Final = 2
OUTCOME_K: Final = 3
OUTCOME_DECAY_PER_HOP: Final = 0.3
#: How long a pulse derived from an outcome stays collectable, in seconds (7 days).
OUTCOME_PULSE_TTL_S: Final = 7 * 24 * 3600

#: Bytes of blake3 kept for a pulse_id (128 bits).
PULSE_ID_BYTES: Final = 16
