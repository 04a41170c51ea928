"""`dreamcycle keys`: this peer's signing key and the keyring of peers it trusts."""

from __future__ import annotations

import argparse
import json
from typing import Any

from dreamcycle.daemon.cli.common import config_options, load, print_table, run_guarded


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "keys",
        help="signing key and trusted peers (init, show, trust, revoke, list)",
        description="Every entry a peer publishes is signed with its Ed25519 key; a peer "
        "applies only entries signed by a key in its keyring that belongs to the entry's "
        "origin peer. Keys are trusted only by an explicit `keys trust` (or a keyring file "
        "the operator distributes), never implicitly. See SECURITY.md.",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    init = actions.add_parser(
        "init",
        parents=[config_options()],
        help="create this peer's private key (0600, in the data directory)",
        description="Create this peer's Ed25519 private key at signing.key_file (mode 0600) and "
        "print its public key. An existing key is never overwritten, except with --rotate: "
        "the old key is kept beside the new one (renamed with its key id). Rotate without a "
        "gap: trust the new key on every peer first, then rotate here, then give the old key "
        "a not-after date (keys trust ... --not-after) or revoke it.",
    )
    replacing = init.add_mutually_exclusive_group()
    replacing.add_argument("--rotate", action="store_true", help="replace an existing key")
    replacing.add_argument(
        "--if-missing",
        action="store_true",
        help="an existing key is kept and it is not an error (exit 0): for a service that "
        "makes its key at its first start",
    )
    init.set_defaults(handler=lambda args: run_guarded(lambda: _init(args)))

    show = actions.add_parser(
        "show",
        parents=[config_options()],
        help="print this peer's public key",
        description="Print this peer's id, key id and public key: what other peers pass to "
        "`dreamcycle keys trust PEER --public-key KEY`.",
    )
    show.add_argument("--json", action="store_true", help="the keyring entry, as JSON")
    show.set_defaults(handler=lambda args: run_guarded(lambda: _show(args)))

    trust = actions.add_parser(
        "trust",
        parents=[config_options()],
        help="add (or update) a peer's public key in the keyring",
        description="Trust PEER's public key: the one given with --public-key, or else the one "
        "PEER's heartbeat publishes in the zeitgeist. Check the key id printed against the "
        "one PEER's `keys show` prints before relying on it (or pass it with --key-id, which "
        "refuses any other key). Trusting a second key of a peer keeps the first: both are "
        "valid while the peer rotates.",
    )
    trust.add_argument("peer", metavar="PEER", help="the peer id the key belongs to")
    trust.add_argument("--public-key", metavar="BASE64", help="the key (default: heartbeat's)")
    trust.add_argument("--key-id", metavar="ID", help="refuse unless the key has this id")
    trust.add_argument(
        "--role",
        action="append",
        choices=("peer", "observer", "operator"),
        help="what the key is trusted for (repeatable; default: peer)",
    )
    trust.add_argument("--not-before", metavar="TIME", help="valid from (ISO 8601)")
    trust.add_argument("--not-after", metavar="TIME", help="valid until (ISO 8601)")
    trust.set_defaults(handler=lambda args: run_guarded(lambda: _trust(args)))

    revoke = actions.add_parser(
        "revoke",
        parents=[config_options()],
        help="stop trusting a key, for good",
        description="Mark KEY_ID revoked: nothing it signed is applied from now on, whatever "
        "its date. A revoked key cannot be trusted again.",
    )
    revoke.add_argument("key_id", metavar="KEY_ID")
    revoke.set_defaults(handler=lambda args: run_guarded(lambda: _revoke(args)))

    listing = actions.add_parser(
        "list",
        parents=[config_options()],
        help="the keys in the keyring",
        description="Every key in the keyring with its peer, roles, validity and whether it is "
        "revoked, and this peer's own key.",
    )
    listing.add_argument("--json", action="store_true", help="the keyring file's content")
    listing.set_defaults(handler=lambda args: run_guarded(lambda: _list(args)))


def _init(args: argparse.Namespace) -> int:
    from dreamcycle.daemon.signing_keys import init_key, read_signer

    config = load(args)
    if args.if_missing and config.key_path.exists():
        # Read: an unusable key kept now would only be refused by the start that follows.
        read_signer(config)
        print(f"kept {config.key_path} (exists)")
        return 0
    signer, retired = init_key(config, rotate=args.rotate)
    if retired is not None:
        print(f"previous key kept as {retired}")
    print(f"created {config.key_path} (mode 0600)")
    _print_key(config.peer.id, signer.key_id, signer.public_key)
    return 0


def _show(args: argparse.Namespace) -> int:
    from dreamcycle.daemon.signing_keys import KeyUnavailable, read_signer

    config = load(args)
    signer = read_signer(config)
    if signer is None:
        raise KeyUnavailable(f"no private key at {config.key_path}; run `dreamcycle keys init`")
    if args.json:
        print(json.dumps(signer.trusted_key().to_json()))
    else:
        _print_key(config.peer.id, signer.key_id, signer.public_key)
    return 0


def _print_key(peer_id: str, key_id: str, public_key: str) -> None:
    print(f"peer       {peer_id}")
    print(f"key id     {key_id}")
    print(f"public key {public_key}")


def _trust(args: argparse.Namespace) -> int:
    from dreamcycle.daemon.signing_keys import read_keyring, write_keyring
    from dreamcycle.zeitgeist.signing import TrustedKey, decode_public_key, key_id_of

    config = load(args)
    public_key = args.public_key or _heartbeat_key(config, args.peer)
    key_id = key_id_of(decode_public_key(public_key))
    if args.key_id is not None and args.key_id != key_id:
        raise ValueError(
            f"the key offered for {args.peer} has id {key_id}, not {args.key_id}: not trusted"
        )
    keyring = read_keyring(config.keyring_path)
    known = keyring.keys.get(key_id)
    if known is not None and known.revoked:
        raise ValueError(f"key {key_id} was revoked; a revoked key cannot be trusted again")
    if known is not None and known.peer_id != args.peer:
        raise ValueError(f"key {key_id} is already trusted for peer {known.peer_id}")
    # Updating a key (giving it an end date, say) keeps what the command does not name.
    not_before = _ms_or_none(args.not_before, "--not-before")
    not_after = _ms_or_none(args.not_after, "--not-after")
    key = TrustedKey(
        peer_id=args.peer,
        key_id=key_id,
        public_key=public_key,
        roles=tuple(args.role or (known.roles if known else ("peer",))),
        not_before_ms=not_before
        if not_before is not None or known is None
        else known.not_before_ms,
        not_after_ms=not_after if not_after is not None or known is None else known.not_after_ms,
    )
    write_keyring(config.keyring_path, keyring.with_key(key))
    print(f"{'updated' if known else 'trusted'} key {key_id} of peer {args.peer} "
          f"({', '.join(key.roles)}) in {config.keyring_path}")  # fmt: skip
    return 0


def _heartbeat_key(config: Any, peer_id: str) -> str:
    """The public key `peer_id`'s heartbeat publishes; ValueError when there is none."""
    from dreamcycle.daemon.runtime import open_backend
    from dreamcycle.zeitgeist.log import MAX_HEARTBEAT_BYTES, Heartbeat
    from dreamcycle.zeitgeist.object_keys import heartbeat_key

    backend = open_backend(config)
    try:
        beat = Heartbeat.from_bytes(
            backend.read(heartbeat_key(peer_id), max_bytes=MAX_HEARTBEAT_BYTES)
        )
    except KeyError:
        raise ValueError(
            f"peer {peer_id} has no heartbeat in the zeitgeist; pass --public-key"
        ) from None
    finally:
        backend.close()
    if beat.public_key is None:
        raise ValueError(f"peer {peer_id}'s heartbeat carries no public key; pass --public-key")
    return beat.public_key


def _ms_or_none(text: str | None, option: str) -> int | None:
    from dreamcycle.store.timefmt import ms_from_iso

    if text is None:
        return None
    try:
        return ms_from_iso(text)
    except ValueError:
        raise ValueError(f"{option} {text!r} is not an ISO 8601 time") from None


def _revoke(args: argparse.Namespace) -> int:
    from dreamcycle.daemon.signing_keys import read_keyring, write_keyring

    config = load(args)
    keyring = read_keyring(config.keyring_path)
    if args.key_id not in keyring.keys:
        raise ValueError(f"key {args.key_id} is not in {config.keyring_path}")
    write_keyring(config.keyring_path, keyring.revoke(args.key_id))
    key = keyring.keys[args.key_id]
    print(f"revoked key {args.key_id} of peer {key.peer_id}")
    return 0


def _list(args: argparse.Namespace) -> int:
    from dreamcycle.daemon.signing_keys import read_keyring, read_signer
    from dreamcycle.store.timefmt import iso_from_ms

    config = load(args)
    keyring = read_keyring(config.keyring_path)
    if args.json:
        print(json.dumps(keyring.to_json(), indent=2))
        return 0
    signer = read_signer(config)
    own = "none (dreamcycle keys init)" if signer is None else signer.key_id
    print(f"this peer: {config.peer.id}, key {own}, mode {config.signing.mode}")
    rows = [
        {
            "peer": key["peer_id"],
            "key_id": key["key_id"],
            "roles": ",".join(key["roles"]),
            "not_before": None
            if key["not_before_ms"] is None
            else iso_from_ms(key["not_before_ms"]),
            "not_after": None if key["not_after_ms"] is None else iso_from_ms(key["not_after_ms"]),
            "revoked": "revoked" if key["revoked"] else "",
        }
        for key in keyring.to_json()["keys"]
    ]
    print_table(rows, ["peer", "key_id", "roles", "not_before", "not_after", "revoked"])
    return 0
