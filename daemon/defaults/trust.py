"""What this peer trusts: its signing key and keyring, how strictly entries must be signed,
how closely a remote chunk's embedding must match this peer's, and how refused objects
are remembered or read again once their key is trusted.
"""

from __future__ import annotations

from typing import Final

from dreamcycle.zeitgeist import defaults as zeitgeist_defaults

#: This peer's Ed25519 private key and the keyring of trusted public keys; relative paths
#: are inside the data directory.
SIGNING_KEY_FILE: Final = "peer.key"
SIGNING_KEYRING_FILE: Final = "keyring.json"
#: "strict": only entries signed by a trusted key of their origin peer are applied, and
#: the daemon does not start without a key. "permissive" (migration only): unsigned
#: entries and unknown keys are accepted too, and the daemon warns at every start.
SIGNING_MODE: Final = "strict"
SIGNING_MODES: Final = ("strict", "permissive")
#: Mode of the private key file; a key that group or others may read is refused.
KEY_FILE_MODE: Final = 0o600
#: A remote chunk is adopted only if its embedding and this peer's embedding of its title
#: and content (same model) have at least this cosine: the same text embeds alike whatever
#: its batch, and a different text stays below it (tests/test_store_embedder.py and
#: tests/test_adopt_titled.py check both on the real model).
EMBEDDING_MATCH_MIN_COSINE: Final = 0.98
#: Times one publish finds its claim or segment key taken by an object this peer's key did
#: not seal (each time it skips the whole run of forged claims in the way, so only a writer
#: racing its claims makes it happen again); the segment then waits for the next cycle.
FORGED_CLAIMS_PER_PUBLISH: Final = 64
#: Rejected objects remembered so each is logged once (the counter counts them all).
REJECTION_LOG_MEMORY: Final = zeitgeist_defaults.LOGGED_OBJECTS_MEMORY
#: Segments refused for want of a trusted key are read again once the keyring trusts it
#: (a peer added after it published): those dated up to this long ago, and at most this
#: many, the newest kept. Any other refusal is for good and kept nowhere.
AWAIT_KEY_FOR_MS: Final = 7 * 24 * 3600 * 1000
AWAIT_KEY_SEGMENTS: Final = 10_000
#: Learned keys from another peer met before their decision's attribution wait for it (as
#: long as an outcome waits for its decision, `pulses.outcome_wait_s`): at most this many,
#: the newest kept, and at most this many applied per cycle.
AWAIT_ATTRIBUTION_KEYS: Final = 10_000
RETRIED_KEYS_PER_CYCLE: Final = 1_000
#: Where `keys init --rotate` moves a key file it cannot use (unreadable, or open to other
#: users): beside it, named `<key file>.unusable-<UTC time>`, never deleted.
SIGNING_KEY_UNUSABLE_SUFFIX: Final = "unusable"
