"""Why a signed object was not accepted: the reasons a signature check (zeitgeist/signing.py)
and the authority rules (daemon/cycle/authority.py) give, each the label of the rejection
counter."""

from __future__ import annotations

import enum


class Rejection(enum.StrEnum):
    """Why a signed object was not accepted; the label of the rejection counter."""

    UNSIGNED = "unsigned"
    UNKNOWN_KEY = "unknown_key"
    BAD_SIGNATURE = "bad_signature"
    REVOKED_KEY = "revoked_key"
    SIGNER_NOT_ORIGIN = "signer_not_origin"
    KEY_NOT_YET_VALID = "key_not_yet_valid"
    KEY_EXPIRED = "key_expired"
    #: A seal naming another object: a segment copied under a different key.
    WRONG_OBJECT = "wrong_object"
    #: A seal whose digest is not that of the lines it precedes.
    DIGEST_MISMATCH = "digest_mismatch"
    #: A segment under this peer's own name that this peer did not write.
    NOT_WRITTEN_HERE = "not_written_here"
    # Authority: a valid signature by a key without the right to make the change.
    #: An outcome, attribution or learned key for a decision another peer made.
    NOT_DECISION_OWNER = "not_decision_owner"
    #: Deleting or superseding a chunk that is pinned or kept `never`, or changing a
    #: pin, by a key not marked "operator".
    NOT_OPERATOR = "not_operator"
    #: A pulse (or an outcome's observer) naming a peer other than its signer.
    CLAIMS_OTHER_PEER = "claims_other_peer"
    #: A learned key for a decision its signer published no attribution of here (nor this
    #: peer recorded), or naming a chunk that the decision's attribution did not return.
    UNATTRIBUTED_KEY = "unattributed_key"
