"""Three peers learn from outcomes through one shared zeitgeist, on real text.

The story, driven through the real command-line tools as a user would run them:

1. Python's language reference (`pydoc_data.topics`, shipped with Python) is split
   into paragraph chunks. Three peers each ingest a different, partly overlapping
   slice: alpha and beta share some chunks, beta and gamma share some, alpha and
   gamma share none, though gamma holds the paragraphs next to alpha's.
2. One downscale cycle per peer ages its memory by one half-life (fresh chunks
   start at salience 0.5, the value of default importance).
3. alpha recalls for a question about exceptions; the decision went well and
   used every chunk recalled (`pulse-emit outcome --reward 0.9 --cited ...`:
   only cited chunks are credited). alpha recalls for string formatting; that
   decision went badly (`--reward -0.8 --cited ...`). beta emits a decay pulse
   about importing modules.
4. Dream cycles run on every peer: alpha turns its outcomes into pulses and
   publishes them; beta and gamma apply them over their own k-NN graphs, and
   everyone applies beta's pulse.
5. Before/after tables show the mean salience of the chunks nearest each seed on
   every peer, including gamma, which never held a chunk alpha recalled.
6. A percentile sweep on alpha keeps what helped and moves what misled to the
   cold tier (forgotten from the live index, yet revivable).

Every claim is checked; the exit status is 0 only if all of them hold.

    .venv/bin/python scripts/demo.py [--dir demo-data]

One file: the demo runs as one standalone script (`make demo`), and its steps tell one story
in order.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from pydoc_data import topics as pydoc_topics
from typing import Any, Final

import numpy as np

from dreamcycle.daemon.cli.common import print_table
from dreamcycle.daemon.defaults import DATABASE_FILE, ENV_PREFIX
from dreamcycle.pulses.vectors import Vectors
from dreamcycle.store.database import Database
from dreamcycle.store.embedder import Embedder
from dreamcycle.store.hashing import content_hash

DEFAULT_DEMO_DIR: Final = Path("demo-data")
#: Written into the demo directory, so a later run may wipe it (and nothing else).
MARKER_FILE: Final = ".dreamcycle-demo"
ZEITGEIST_SUBDIR: Final = "zeitgeist"

#: Reference topics that make up the corpus: statements, exceptions, strings and formatting.
CORPUS_TOPICS: Final = tuple(
    [
        "assert",
        "augassign",
        "booleans",
        "break",
        "class",
        "context-managers",
        "continue",
        "del",
        "exceptions",
        "for",
        "formatstrings",
        "function",
        "global",
        "if",
        "import",
        "lambda",
        "nonlocal",
        "pass",
        "raise",
        "return",
        "strings",
        "truth",
        "try",
        "while",
        "with",
        "yield",
    ]
)
#: Shorter paragraphs are headings and rule lines, not memories.
MIN_PARAGRAPH_CHARS: Final = 40
CHUNK_KIND: Final = "note"
TOPIC_KEY_PREFIX: Final = "pydoc/"

#: A peer holds the chunks whose corpus position modulo SLICE_PERIOD is one of its residues.
SLICE_PERIOD: Final = 4
PEER_RESIDUES: Final = {"alpha": (0, 1), "beta": (1, 2), "gamma": (2, 3)}
RECALLER: Final = "alpha"
PULSER: Final = "beta"
#: The peer that must not hold any chunk the recaller recalled.
STRANGER: Final = "gamma"

REWARD_QUERY: Final = "how do I catch an exception with a try statement"
REWARD: Final = 0.9
REWARD_REASON: Final = "demo/exceptions"
PENALTY_QUERY: Final = "format a number with a format specifier in an f-string"
PENALTY: Final = -0.8
PENALTY_REASON: Final = "demo/formatting"
DECAY_TEXT: Final = "importing a module from a package and binding its name"
DECAY_STRENGTH: Final = 0.5
DECAY_REASON: Final = "demo/imports"

#: How many hex digits of a chunk hash the recall table shows, and outcomes cite.
CITED_PREFIX: Final = 12
#: A pulse's first hop lands on the k = 3 chunks nearest its seed; that is the neighbourhood.
NEIGHBOURS_PER_SEED: Final = 3
#: Order in which peers run dream cycles after the outcomes: the recaller goes again last
#: to pick up the pulser's entry.
LEARNING_CYCLE_ORDER: Final = ("alpha", "beta", "gamma", "alpha")
SUBPROCESS_TIMEOUT_S: Final = 600.0
STDERR_TAIL_LINES: Final = 20
OUTPUT_INDENT: Final = "    "


class DemoError(Exception):
    """A step of the demo could not run; the message says which and why."""


class DemoDirectoryRefused(DemoError):
    """The demo directory exists and was not made by this demo, so it is not wiped."""


@dataclass(frozen=True)
class Chunk:
    position: int
    topic: str
    content: str
    digest: str


@dataclass
class Peer:
    name: str
    demo_dir: Path
    chunks: list[Chunk] = field(default_factory=list)
    ingest_started: float = 0.0

    @property
    def data_dir(self) -> Path:
        return self.demo_dir / self.name

    @property
    def config_path(self) -> Path:
        return self.demo_dir / f"{self.name}.toml"

    @property
    def corpus_path(self) -> Path:
        return self.demo_dir / f"{self.name}.jsonl"

    @property
    def database_path(self) -> Path:
        return self.data_dir / DATABASE_FILE


@dataclass(frozen=True)
class Claim:
    statement: str
    holds: bool


@dataclass(frozen=True)
class Neighbourhood:
    """Labels of the chunks nearest some seeds on one peer, and how many seeds it holds."""

    labels: frozenset[int]
    seeds_held: int
    seeds: int


# ---- corpus and peers -------------------------------------------------------------------


def build_corpus() -> list[Chunk]:
    """Paragraphs of the chosen reference topics, deduplicated by content hash, in order."""
    chunks: list[Chunk] = []
    seen: set[str] = set()
    for topic in CORPUS_TOPICS:
        # Topics come and go between Python versions; a missing one only shrinks the corpus.
        for paragraph in re.split(r"\n\s*\n", pydoc_topics.topics.get(topic, "")):
            text = paragraph.strip()
            digest = content_hash(text)
            if len(text) < MIN_PARAGRAPH_CHARS or digest in seen:
                continue
            seen.add(digest)
            chunks.append(Chunk(len(chunks), topic, text, digest))
    return chunks


def make_peers(demo_dir: Path, corpus: Sequence[Chunk]) -> dict[str, Peer]:
    peers = {name: Peer(name, demo_dir) for name in PEER_RESIDUES}
    for chunk in corpus:
        for name, residues in PEER_RESIDUES.items():
            if chunk.position % SLICE_PERIOD in residues:
                peers[name].chunks.append(chunk)
    return peers


def prepare_directory(demo_dir: Path) -> None:
    """Wipe a previous run's directory; refuse to touch one the demo did not create."""
    if demo_dir.exists():
        if not demo_dir.is_dir():
            raise DemoDirectoryRefused(f"{demo_dir} exists and is not a directory")
        if any(demo_dir.iterdir()) and not (demo_dir / MARKER_FILE).exists():
            raise DemoDirectoryRefused(
                f"{demo_dir} is not empty and has no {MARKER_FILE} marker: it was not made by "
                "this demo, so it is left alone (choose another --dir)"
            )
        shutil.rmtree(demo_dir)
    demo_dir.mkdir(parents=True)
    (demo_dir / MARKER_FILE).write_text("made by scripts/demo.py; wiped on its next run\n")


def write_peer_files(peer: Peer) -> None:
    with peer.corpus_path.open("w", encoding="utf-8") as out:
        for chunk in peer.chunks:
            record = {
                "title": chunk.topic,
                "topic_key": TOPIC_KEY_PREFIX + chunk.topic,
                "kind": CHUNK_KIND,
                "content": chunk.content,
            }
            out.write(json.dumps(record) + "\n")
    zeitgeist_dir = peer.demo_dir / ZEITGEIST_SUBDIR
    peer.config_path.write_text(
        f"""# Written by scripts/demo.py for peer {peer.name}.
[peer]
id = {json.dumps(peer.name)}
data_dir = {json.dumps(str(peer.data_dir.resolve()))}

[zeitgeist]
backend = "dir"
dir = {json.dumps(str(zeitgeist_dir.resolve()))}

[metrics]
# Several daemons on one machine: no shared metrics port.
listen = ""

[log]
level = "warning"
format = "text"

[sweep]
# Cycles only report what a sweep would take; the demo sweeps once, explicitly, at the end.
dry_run = true
# The demo's chunks are minutes old: no grace period, or the sweep could take none of them.
grace_s = 0.0
""",
        encoding="utf-8",
    )


# ---- running the command-line tools ------------------------------------------------------


def _program(name: str, module: str) -> list[str]:
    """The installed console script beside this interpreter, else the module it runs."""
    installed = Path(sys.executable).parent / name
    return [str(installed)] if installed.exists() else [sys.executable, "-m", module]


PROGRAMS: Final = {
    "dreamcycle": ("dreamcycle", "dreamcycle.daemon.cli.main"),
    "pulse-emit": ("pulse-emit", "dreamcycle.daemon.cli.pulse_emit"),
}


def _clean_environment(extra: Mapping[str, str]) -> dict[str, str]:
    """The caller's environment without DREAMCYCLE_* (they would override the peer's file)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env.update(extra)
    return env


def _shown_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def run_tool(
    program: str,
    verb: str,
    peer: Peer,
    *args: str,
    env: Mapping[str, str] | None = None,
    show_output: bool = True,
) -> str:
    """Run `program verb --config <peer's file> args`, echo it, return its stdout.

    `verb` may be a verb and its action ("keys init")."""
    name, module = PROGRAMS[program]
    words = verb.split()
    command = [*_program(name, module), *words, "--config", str(peer.config_path), *args]
    shown = [name, *words, "--config", _shown_path(peer.config_path), *args]
    prefix = " ".join(f"{k}={v}" for k, v in (env or {}).items())
    print(f"$ {prefix + ' ' if prefix else ''}{shlex.join(shown)}")
    try:
        done = subprocess.run(
            command,
            env=_clean_environment(env or {}),
            capture_output=True,
            text=True,
            timeout=SUBPROCESS_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise DemoError(
            f"`{shlex.join(shown)}` did not finish in {SUBPROCESS_TIMEOUT_S:.0f} s"
        ) from None
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-STDERR_TAIL_LINES:])
        raise DemoError(f"`{shlex.join(shown)}` exited with status {done.returncode}:\n{tail}")
    if show_output:
        for line in done.stdout.rstrip("\n").splitlines():
            print(OUTPUT_INDENT + line)
    return done.stdout


def exchange_keys(peers: Mapping[str, Peer]) -> None:
    """Each peer makes its signing key and trusts the others' public keys, explicitly:
    a peer applies only entries signed by a key it trusts (SECURITY.md)."""
    public_keys: dict[str, str] = {}
    for name, peer in peers.items():
        run_tool("dreamcycle", "keys init", peer, show_output=False)
        shown = json.loads(run_tool("dreamcycle", "keys show", peer, "--json", show_output=False))
        public_keys[name] = shown["public_key"]
    for name, peer in peers.items():
        for other, public_key in public_keys.items():
            if other != name:
                run_tool(
                    "dreamcycle", "keys trust", peer, other, "--public-key", public_key,
                    show_output=False,
                )  # fmt: skip


# ---- reading a peer's state (read-only, between commands) --------------------------------


def saliences(peer: Peer) -> dict[int, float]:
    """Salience of every live chunk of `peer`, by rowid."""
    db = Database(peer.database_path)
    try:
        return {row.rowid: row.salience for row in db.salience_rows() if not row.tombstoned}
    finally:
        db.close()


def last_cycle_phases(peer: Peer) -> dict[str, Any]:
    db = Database(peer.database_path)
    try:
        cycle = db.last_cycle()
    finally:
        db.close()
    if cycle is None:
        raise DemoError(f"{peer.name} has no recorded dream cycle")
    phases: dict[str, Any] = cycle["phases"]
    return phases


def pulse_count(peer: Peer) -> int:
    db = Database(peer.database_path)
    try:
        return db.counts()["pulses_applied"]
    finally:
        db.close()


def seed_vectors(peer: Peer, digests: Sequence[str]) -> Vectors:
    """Stored embeddings of `digests` on `peer` (the vectors its outcome pulses start from)."""
    db = Database(peer.database_path)
    try:
        found = [db.embedding_of_hash(digest) for digest in digests]
    finally:
        db.close()
    missing = [d[:12] for d, v in zip(digests, found, strict=True) if v is None]
    if missing:
        raise DemoError(f"{peer.name} has no embedding for recalled chunks {', '.join(missing)}")
    return np.stack([v for v in found if v is not None]).astype(np.float32)


def neighbourhood(
    peer: Peer, embedder: Embedder, seeds: Vectors, seed_digests: Sequence[str]
) -> Neighbourhood:
    """The NEIGHBOURS_PER_SEED live chunks nearest each seed on `peer`, by exact cosine."""
    db = Database(peer.database_path)
    try:
        labels, vectors, _tombstoned = db.embeddings(embedder.index_version, embedder.dim)
        held = sum(
            1
            for digest in seed_digests
            if (obs := db.observation_by_hash(digest)) is not None and obs.deleted_at is None
        )
    finally:
        db.close()
    if len(labels) < NEIGHBOURS_PER_SEED:
        raise DemoError(f"{peer.name} holds only {len(labels)} indexed chunks")
    similarity = seeds @ vectors.T
    nearest = np.argsort(-similarity, axis=1, kind="stable")[:, :NEIGHBOURS_PER_SEED]
    return Neighbourhood(
        labels=frozenset(int(labels[i]) for i in nearest.ravel()),
        seeds_held=held,
        seeds=len(seed_digests),
    )


def mean_of(values: Mapping[int, float], labels: frozenset[int]) -> float:
    return float(np.mean([values[label] for label in labels if label in values]))


# ---- the story -----------------------------------------------------------------------------


def heading(number: int, text: str) -> None:
    print(f"\n== {number}. {text}")


def recall(peer: Peer, query: str) -> tuple[str, list[str]]:
    """Recall through the CLI; returns the decision hash and the recalled chunk hashes."""
    output = run_tool("dreamcycle", "recall", peer, query, "--json", show_output=False)
    result = json.loads(output)
    hits = result["hits"]
    print_table(
        [
            {
                "similarity": h["similarity"],
                "salience": h["salience"],
                "hash": h["content_hash"][:12],
                "topic": h["title"],
                "text": " ".join(h["content"].split())[:60],
            }
            for h in hits
        ],
        ["similarity", "salience", "hash", "topic", "text"],
    )
    decision = result["decision_hash"]
    if not decision:
        raise DemoError(f"recall on {peer.name} for {query!r} found nothing")
    print(f"decision {decision}")
    return str(decision), [str(h["content_hash"]) for h in hits]


def run_cycle(peer: Peer, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    run_tool("dreamcycle", "run", peer, "--once", env=env)
    phases = last_cycle_phases(peer)
    propagate = phases.get("salience_pulse_propagate", {})
    print(
        f"{OUTPUT_INDENT}{peer.name}: {phases.get('scan', {}).get('fetched', 0)} segments read, "
        f"{propagate.get('from_outcomes', 0)} pulses made from outcomes, "
        f"{propagate.get('applied', 0)} pulses applied ({propagate.get('changed', 0)} salience "
        f"updates), {phases.get('promote', {}).get('published_entries', 0)} entries published"
    )
    return phases


def age_memory(peers: Mapping[str, Peer]) -> None:
    variable = f"{ENV_PREFIX}DOWNSCALE_{CHUNK_KIND.upper()}_HALF_LIFE_S"
    print(
        "Fresh chunks start at salience 0.5 (0.25 + 0.05 x importance 5). The first\n"
        "cycle of each peer indexes its chunks and runs downscale with the half-life of\n"
        f"'{CHUNK_KIND}' chunks set to the time since that peer's ingest: as if one half-life\n"
        "had passed, salience halves. Later cycles use the default half-life (days), so over\n"
        "the seconds this demo lasts every change below comes from pulses."
    )
    for peer in peers.values():
        before = saliences(peer)
        half_life_s = time.time() - peer.ingest_started
        run_cycle(peer, env={variable: f"{half_life_s:.1f}"})
        after = saliences(peer)
        print(
            f"{OUTPUT_INDENT}{peer.name}: mean salience {np.mean(list(before.values())):.3f} -> "
            f"{np.mean(list(after.values())):.3f} over {len(after)} chunks"
        )


def compare(
    peers: Mapping[str, Peer],
    before: Mapping[str, dict[int, float]],
    after: Mapping[str, dict[int, float]],
    neighbourhoods: Mapping[str, Mapping[str, Neighbourhood]],
    expected_sign: Mapping[str, int],
) -> list[Claim]:
    """Print the before/after table for every peer and neighbourhood; one claim per cell."""
    claims: list[Claim] = []
    rows: list[dict[str, Any]] = []
    for name in peers:
        touched: set[int] = set()
        for label, sign in expected_sign.items():
            hood = neighbourhoods[name][label]
            touched |= hood.labels
            was, now = mean_of(before[name], hood.labels), mean_of(after[name], hood.labels)
            moved = now > was if sign > 0 else now < was
            rows.append(
                {
                    "peer": name,
                    "neighbourhood": label,
                    "chunks": len(hood.labels),
                    "seeds held": f"{hood.seeds_held}/{hood.seeds}" if hood.seeds else "(text)",
                    "before": was,
                    "after": now,
                    "change": f"{now - was:+.4f}",
                    "expected": "rise" if sign > 0 else "fall",
                    "ok": "yes" if moved else "NO",
                }
            )
            claims.append(
                Claim(
                    f"{name}: the {label} neighbourhood's mean salience "
                    f"{'rose' if sign > 0 else 'fell'}",
                    moved,
                )
            )
        rest = frozenset(set(after[name]) - touched)
        was, now = mean_of(before[name], rest), mean_of(after[name], rest)
        rows.append(
            {
                "peer": name,
                "neighbourhood": "every other chunk",
                "chunks": len(rest),
                "seeds held": "",
                "before": was,
                "after": now,
                "change": f"{now - was:+.4f}",
                "expected": "",
                "ok": "",
            }
        )
    print_table(
        rows,
        [
            "peer",
            "neighbourhood",
            "chunks",
            "seeds held",
            "before",
            "after",
            "change",
            "expected",
            "ok",
        ],
    )
    return claims


def sweep_and_check(
    peers: Mapping[str, Peer], rewarded: list[str], penalised: list[str]
) -> list[Claim]:
    run_tool("dreamcycle", "sweep", peers[STRANGER], "--dry-run", "--show", "3")
    recaller = peers[RECALLER]
    run_tool("dreamcycle", "sweep", recaller, "--show", "5")
    db = Database(recaller.database_path)
    try:
        state = {digest: db.observation_by_hash(digest) for digest in rewarded + penalised}
    finally:
        db.close()
    kept = sum((obs := state[d]) is not None and obs.live for d in rewarded)
    cold = sum(
        (obs := state[d]) is not None and obs.deleted_at is None and obs.cold_at is not None
        for d in penalised
    )
    print(
        f"{OUTPUT_INDENT}{RECALLER} after the sweep: {kept}/{len(rewarded)} chunks of the rewarded "
        f"decision kept live, {cold}/{len(penalised)} chunks of the penalised decision moved to "
        "the cold tier (not deleted: `dreamcycle forgotten` lists them)"
    )
    run_tool("dreamcycle", "forgotten", recaller, "--limit", "5")
    return [
        Claim(
            f"{RECALLER}: the sweep kept every chunk of the rewarded decision live",
            kept == len(rewarded),
        ),
        Claim(
            f"{RECALLER}: the sweep moved every chunk of the penalised decision to the cold tier",
            cold == len(penalised),
        ),
    ]


def run_demo(demo_dir: Path) -> list[Claim]:
    claims: list[Claim] = []
    prepare_directory(demo_dir)
    corpus = build_corpus()
    peers = make_peers(demo_dir, corpus)
    for peer in peers.values():
        write_peer_files(peer)
    heading(1, "three peers, three slices of Python's language reference")
    print(
        f"{len(corpus)} paragraphs of {len(CORPUS_TOPICS)} topics; one shared zeitgeist "
        f"directory: {_shown_path(demo_dir / ZEITGEIST_SUBDIR)}"
    )
    holdings = {name: {c.digest for c in peer.chunks} for name, peer in peers.items()}
    for name, peer in peers.items():
        shared = ", ".join(
            f"{len(holdings[name] & holdings[other])} with {other}"
            for other in peers
            if other != name
        )
        print(f"{OUTPUT_INDENT}{name}: {len(peer.chunks)} chunks (shared: {shared})")
    exchange_keys(peers)
    for peer in peers.values():
        peer.ingest_started = time.time()
        run_tool("dreamcycle", "ingest", peer, _shown_path(peer.corpus_path))

    heading(2, "first cycle: index, publish, and age memory by one half-life")
    age_memory(peers)
    before = {name: saliences(peer) for name, peer in peers.items()}

    recaller, pulser = peers[RECALLER], peers[PULSER]
    heading(3, f"{RECALLER} recalls context for a decision that turns out well")
    rewarded_decision, rewarded = recall(recaller, REWARD_QUERY)
    run_tool(
        "pulse-emit",
        "outcome",
        recaller,
        "--decision",
        rewarded_decision,
        "--reward",
        str(REWARD),
        "--reason",
        REWARD_REASON,
        # The decision used every chunk recalled: cite them (the prefixes the table shows).
        "--cited",
        *[digest[:CITED_PREFIX] for digest in rewarded],
    )
    heading(4, f"{RECALLER} recalls context for a decision that turns out badly")
    penalised_decision, penalised = recall(recaller, PENALTY_QUERY)
    run_tool(
        "pulse-emit",
        "outcome",
        recaller,
        "--decision",
        penalised_decision,
        "--reward",
        str(PENALTY),
        "--reason",
        PENALTY_REASON,
        "--cited",
        *[digest[:CITED_PREFIX] for digest in penalised],
    )
    heading(5, f"{PULSER} decays the neighbourhood of a text, on every peer")
    run_tool(
        "pulse-emit",
        "pulse",
        pulser,
        "--text",
        DECAY_TEXT,
        "--kind",
        "decay",
        "--strength",
        str(DECAY_STRENGTH),
        "--reason",
        DECAY_REASON,
    )

    heading(6, "dream cycles: outcomes become pulses, pulses travel through the zeitgeist")
    for name in LEARNING_CYCLE_ORDER:
        run_cycle(peers[name])
    after = {name: saliences(peer) for name, peer in peers.items()}

    heading(7, "mean salience near each seed, before and after, on every peer")
    print(
        f"A neighbourhood is the {NEIGHBOURS_PER_SEED} chunks nearest each seed on that peer "
        "(where a pulse's first hop lands).\n'seeds held' counts the seed chunks the peer itself "
        f"holds: {STRANGER} holds none of what {RECALLER} recalled, yet learns from it."
    )
    embedder = Embedder()
    decay_seed = embedder.embed([DECAY_TEXT])
    neighbourhoods = {
        name: {
            "rewarded": neighbourhood(peer, embedder, seed_vectors(recaller, rewarded), rewarded),
            "penalised": neighbourhood(
                peer, embedder, seed_vectors(recaller, penalised), penalised
            ),
            "decayed": neighbourhood(peer, embedder, decay_seed, []),
        }
        for name, peer in peers.items()
    }
    stranger_holds = neighbourhoods[STRANGER]["rewarded"].seeds_held + (
        neighbourhoods[STRANGER]["penalised"].seeds_held
    )
    claims.append(
        Claim(f"{STRANGER} holds none of the chunks {RECALLER} recalled", stranger_holds == 0)
    )
    claims += compare(
        peers, before, after, neighbourhoods, {"rewarded": 1, "penalised": -1, "decayed": -1}
    )
    applied = {name: pulse_count(peer) for name, peer in peers.items()}
    expected = len(rewarded) + len(penalised) + 1
    print(
        f"pulses applied: {', '.join(f'{n} {c}' for n, c in applied.items())} (expected {expected})"
    )
    claims.append(
        Claim(
            f"every peer applied all {expected} pulses",
            all(c == expected for c in applied.values()),
        )
    )

    heading(8, "percentile sweep: the bottom of each kind by value goes to the cold tier")
    claims += sweep_and_check(peers, rewarded, penalised)

    heading(9, f"status of {RECALLER}")
    run_tool("dreamcycle", "status", recaller)
    return claims


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Three dreamcycle peers on real text, sharing a local-directory zeitgeist. "
        "Exits 0 only if every claim it prints holds."
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=DEFAULT_DEMO_DIR,
        metavar="DIR",
        help="demo directory, wiped at start (default: ./demo-data)",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        claims = run_demo(args.dir)
    except DemoDirectoryRefused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except DemoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    heading(10, "claims")
    for claim in claims:
        print(f"{OUTPUT_INDENT}[{'ok' if claim.holds else 'FAILED'}] {claim.statement}")
    failed = [c for c in claims if not c.holds]
    print(
        f"\n{len(claims) - len(failed)}/{len(claims)} claims hold ({time.monotonic() - started:.0f} s)"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
