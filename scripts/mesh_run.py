"""Twenty real daemons on one SeaweedFS: delivery, S3 requests by kind, the bucket, and churn.

One run, in order, on a SeaweedFS of its own (`weed mini` on loopback):

* `--peers` daemons (separate `dreamcycle run` processes), each holding the same small
  store (`--chunks` paragraphs of the standard library's documentation), all trusting one
  keyring, downscale and the sweep off (salience moves only through pulses);
* `--items` pulses and outcomes queued across the peers (one outcome in OUTCOME_EVERY):
  a burst of `--burst` at once, the rest at a steady rate over `--steady-s` seconds;
* meanwhile one peer is killed (SIGKILL) for `--kill-s` seconds and started again, a new
  peer joins half way through (a fresh data directory with the same chunks), and one peer
  rotates its key (`keys init --rotate`, the new key trusted in the keyring, the daemon
  restarted: SECURITY.md's steps);
* then it waits until every peer applied every pulse any peer originated, and checks that
  each applied each exactly once and that each peer's salience is what replaying its own
  order gives, bit for bit, and how many of the chunks every peer holds have the same
  salience, bit for bit, on all of them (salience is order-free unless a clamp at 0 or 1
  or a pin floor was met, which only that order meets).

Measured: delivery (per pulse, seconds and polls from its origin applying it to the last
peer applying it), S3 requests per peer per hour by kind (each daemon's own count,
dreamcycle_zeitgeist_requests_total, scraped from its metrics), bytes and objects in the
bucket over time (compaction keeps it bounded), and the same with roll-ups off
(`--rollups off`) for the comparison; docs/scale.md holds the model the figures check.

`--simulate 100,1000` instead runs that many lightweight log clients in this process
against one SeaweedFS (no daemons): each cycle every client publishes a segment and
`--sample` of them poll and read what is new, with and without roll-ups, counting each
reader's requests. Results go to `--out` (default bench-results/mesh.json) with a
description of the machine.

    .venv/bin/python scripts/mesh_run.py [--peers 20] [--items 20000] [--rollups on]
    .venv/bin/python scripts/mesh_run.py --simulate 100,1000

One file: a run of one mesh, its schedule and its report, set up for that run.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, Final

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.bench_common import (
    BenchmarkError,
    Column,
    describe_machine,
    machine_summary,
    parse_positive_ints,
    print_table,
    write_json,
)
from scripts.local_servers import pick_free_ports, start_seaweedfs
from scripts.mesh_check import Settled, agreement, bit_identical_replay, exactly_once
from scripts.mesh_load import Emitter, delivery, documentation_rows, write_rows
from scripts.mesh_peers import (
    MeshPeer,
    admitted,
    ingest_all,
    mesh_settings,
    trust_key,
    wait_for,
)
from scripts.mesh_simulate import simulate

DEFAULT_OUT: Final = Path("bench-results/mesh.json")
OUTCOME_EVERY: Final = 5
SAMPLE_EVERY_S: Final = 15.0
CONVERGE_TIMEOUT_S: Final = 900.0
START_TIMEOUT_S: Final = 900.0
#: The S3 operations reported, by the kind AWS bills them as.
KINDS: Final = {
    "ListObjectsV2": "LIST",
    "GetObject": "GET",
    "PutObject": "PUT",
    "HeadObject": "HEAD",
    "DeleteObjects": "DELETE",
}


class Run:
    """One mesh: its peers, its bucket, what was measured along the way."""

    def __init__(self, args: argparse.Namespace, root: Path, server: Any) -> None:
        self.args = args
        self.root = root
        self.server = server
        self.prefix = f"mesh-{int(time.time())}"
        credentials = {"AWS_ACCESS_KEY_ID": server.access_key_id,
                       "AWS_SECRET_ACCESS_KEY": server.secret_access_key}  # fmt: skip
        self.settings = mesh_settings(
            server.bucket, self.prefix, server.endpoint_url, credentials
        ) | {
            "DREAMCYCLE_ZEITGEIST_COMPACTION_INTERVAL_S": str(args.compaction_s),
            "DREAMCYCLE_ZEITGEIST_ROLLUPS": "true" if args.rollups == "on" else "false",
            "DREAMCYCLE_DOWNSCALE_ENABLED": "false",
            "DREAMCYCLE_SWEEP_ENABLED": "false",
        }  # fmt: skip
        ports = pick_free_ports(args.peers + 1)
        self.peers = [
            MeshPeer(root, f"p{i:02d}", dict(self.settings), ports[i]) for i in range(args.peers)
        ]
        self.newcomer = MeshPeer(root, "newcomer", dict(self.settings), ports[-1])
        self.chunks = write_rows(root / "chunks.jsonl", documentation_rows(args.chunks))
        self.samples: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.started = time.monotonic()
        #: Requests counted by daemons that stopped, per peer and operation.
        self.banked: dict[str, dict[str, int]] = {}
        self.lock = threading.Lock()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def event(self, what: str) -> None:
        print(f"[{self.elapsed():7.1f} s] {what}", flush=True)
        self.events.append({"at_s": round(self.elapsed(), 1), "what": what})

    def everyone(self) -> list[MeshPeer]:
        return [*self.peers, *([self.newcomer] if self.newcomer.starts else [])]

    def ingest(self, peers: list[MeshPeer]) -> None:
        ingest_all(peers, self.chunks)

    def wait(self, probe: Callable[[], bool], what: str, timeout_s: float) -> None:
        wait_for(probe, what, timeout_s, self.everyone)

    def bank(self, peer: MeshPeer) -> None:
        """Keep a daemon's request counts before it stops (its counter starts again)."""
        with self.lock:
            banked = self.banked.setdefault(peer.peer_id, {})
            for operation, count in peer.requests().items():
                banked[operation] = banked.get(operation, 0) + count

    def requests(self) -> dict[str, dict[str, int]]:
        with self.lock:
            counts = {}
            for peer in self.everyone():
                total = dict(self.banked.get(peer.peer_id, {}))
                for operation, count in peer.requests().items():
                    total[operation] = total.get(operation, 0) + count
                counts[peer.peer_id] = total
            return counts

    def live_names(self) -> set[str]:
        return {p.peer_id for p in self.everyone() if p.running()}

    def sample(self) -> None:
        objects = size = 0
        paginator = self.server.client().get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.server.bucket, Prefix=self.prefix + "/"):
            for item in page.get("Contents", []):
                objects += 1
                size += int(item["Size"])
        self.samples.append(
            {"at_s": round(self.elapsed(), 1), "objects": objects, "bytes": size,
             "requests": self.requests(),
             "cycles": {p.peer_id: p.cycles_done() for p in self.everyone()}}
        )  # fmt: skip


def emit_all(run: Run, emitters: dict[str, Emitter]) -> int:
    """The burst, then the steady rate; every emitter on the peers that are running."""
    rng = random.Random(7)
    sent = 0

    def one() -> None:
        nonlocal sent
        live = [e for name, e in emitters.items() if name in run.live_names()]
        emitter = rng.choice(live)
        emitter.outcome() if sent % OUTCOME_EVERY == 0 else emitter.pulse()
        sent += 1

    for _ in range(run.args.burst):
        one()
    run.event(f"burst of {run.args.burst} queued")
    steady = run.args.items - run.args.burst
    began = time.monotonic()
    for number in range(steady):
        due = began + run.args.steady_s * number / max(1, steady)
        time.sleep(max(0.0, due - time.monotonic()))
        one()
    run.event(f"{steady} more queued at a steady rate over {run.args.steady_s:.0f} s")
    return sent


def churn(run: Run) -> None:
    """Kill one peer and bring it back, add a new peer, rotate one key."""
    args = run.args
    victim, rotating = run.peers[1], run.peers[2]
    time.sleep(args.kill_at_s)
    run.bank(victim)
    victim.kill()
    run.event(f"{victim.peer_id} killed for {args.kill_s:.0f} s")
    schedule = [
        (args.kill_at_s + args.kill_s, lambda: back(run, victim)),
        (args.join_at_s, lambda: join(run)),
        (args.rotate_at_s, lambda: rotate(run, rotating)),
    ]
    for at_s, action in sorted(schedule, key=lambda item: item[0]):
        time.sleep(max(0.0, at_s - run.elapsed()))
        action()


def back(run: Run, victim: MeshPeer) -> None:
    victim.start(run.args.interval)
    run.event(f"{victim.peer_id} started again")


def join(run: Run) -> None:
    run.ingest([run.newcomer])
    run.newcomer.start(run.args.interval)
    run.event("newcomer joined")


def rotate(run: Run, peer: MeshPeer) -> None:
    """SECURITY.md: a new key, trusted everywhere (one keyring), then the restart."""
    from dreamcycle.daemon.signing_keys import read_signer

    peer.command("keys init --rotate")
    rt = peer.runtime()
    signer = read_signer(rt.config)
    rt.close()
    assert signer is not None
    trust_key(peer.keyring_path, signer)
    run.bank(peer)
    assert peer.stop() == 0, peer.log_tail()
    peer.start(run.args.interval)
    run.event(f"{peer.peer_id} rotated its key and restarted")


def run_mesh(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="mesh-run-") as scratch:
        root = Path(scratch)
        server = start_seaweedfs(root / "weed")
        run = Run(args, root, server)
        try:
            run.ingest(run.peers)
            for peer in run.peers:
                peer.start(args.interval)
            run.wait(lambda: all(admitted(p, args.chunks) for p in run.peers),
                     "every peer to admit its chunks", START_TIMEOUT_S)  # fmt: skip
            run.event(f"{len(run.peers)} daemons ready")
            run.started = time.monotonic()
            emitters = {p.peer_id: Emitter(p, seed=i) for i, p in enumerate(run.peers)}
            stop_sampling = threading.Event()

            def sampler() -> None:
                while not stop_sampling.wait(SAMPLE_EVERY_S):
                    run.sample()

            threading.Thread(target=sampler, daemon=True).start()
            churner = threading.Thread(target=churn, args=(run,), daemon=True)
            churner.start()
            sent = emit_all(run, emitters)
            for emitter in emitters.values():
                emitter.close()
            churner.join()
            converged = Settled(run.everyone, polls=10)
            run.wait(converged, "every pulse on every peer", CONVERGE_TIMEOUT_S)
            run.event("every peer applied every pulse")
            run.sample()
            stop_sampling.set()
            expected = converged.expected
            once = [asdict(exactly_once(p, expected)) for p in run.everyone()]
            identical = {p.peer_id: bit_identical_replay(p, root) for p in run.everyone()}
            agreed = agreement(run.everyone())
            steady_peers = [p.peer_id for p in run.peers if p is not run.peers[1]]
            report = {
                "sent": sent,
                "pulses": len(expected),
                "delivery": asdict(delivery(run.everyone(), steady_peers)),
                "exactly_once": once,
                "bit_identical_replay": identical,
                "agreement": asdict(agreed),
                "samples": run.samples,
                "events": run.events,
                "duration_s": run.elapsed(),
            }
            # Recorded, not asserted: on a loaded machine a daemon may take longer than its
            # stop deadline to leave a phase (it then exits non-zero, and the next start
            # redoes the phase), which says nothing of what was measured.
            report["exit_codes"] = {peer.peer_id: peer.stop() for peer in run.everyone()}
            return report
        finally:
            for peer in run.everyone():
                if peer.running():
                    peer.kill()
            server.stop()


def per_hour(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Requests per peer per hour by kind, over the run (the peers that ran throughout)."""
    first, last = report["samples"][0], report["samples"][-1]
    hours = (last["at_s"] - first["at_s"]) / 3600
    rows = []
    for peer, counts in sorted(last["requests"].items()):
        before = first["requests"].get(peer, {})
        cycles = last["cycles"].get(peer, 0) - first["cycles"].get(peer, 0)
        row: dict[str, Any] = {"peer": peer, "cycles_per_hour": cycles / hours}
        for operation, kind in KINDS.items():
            made = counts.get(operation, 0) - before.get(operation, 0)
            row[kind] = made / hours
            row[f"{kind}_per_cycle"] = made / cycles if cycles else None
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peers", type=int, default=20)
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--burst", type=int, default=5_000)
    parser.add_argument("--steady-s", type=float, default=720.0)
    parser.add_argument("--chunks", type=int, default=60)
    parser.add_argument("--interval", type=float, default=10.0, help="cycle.interval_s")
    parser.add_argument("--compaction-s", type=float, default=120.0)
    parser.add_argument("--kill-at-s", type=float, default=60.0)
    parser.add_argument("--kill-s", type=float, default=600.0)
    parser.add_argument("--join-at-s", type=float, default=300.0)
    parser.add_argument("--rotate-at-s", type=float, default=420.0)
    parser.add_argument("--rollups", choices=("on", "off"), default="on")
    parser.add_argument("--simulate", help="comma-separated client counts: simulate instead")
    parser.add_argument("--sample", type=int, default=10, help="readers measured per cycle")
    parser.add_argument("--cycles", type=int, default=4, help="simulated cycles")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    machine = describe_machine(("boto3", "hnswlib", "apsw"))
    if args.simulate:
        sizes = parse_positive_ints(args.simulate, "--simulate")
        rows = simulate(sizes, args.sample, args.cycles)
        print(machine_summary(machine))
        print_table(rows, [Column("clients"), Column("rollups"),
                           Column("list", "LIST/reader/cycle", ".2f"),
                           Column("get", "GET/reader/cycle", ".2f"),
                           Column("put", "PUT/client/cycle", ".2f"),
                           Column("writer_get", "GET/roll-up writer/cycle", ".1f"),
                           Column("read_s", "reader poll s", ".3f")])  # fmt: skip
        write_json(args.out, {"machine": machine, "simulation": rows})
        return 0
    if args.peers < 3 or args.items < args.burst:
        raise BenchmarkError("--peers must be >= 3 and --items >= --burst")
    report = run_mesh(args)
    rows = per_hour(report)
    print(machine_summary(machine))
    print(f"{args.peers} peers, roll-ups {args.rollups}, cycle interval {args.interval:g} s, "
          f"{report['sent']} items queued, {report['pulses']} pulses, "
          f"{report['duration_s']:.0f} s")  # fmt: skip
    print_table(
        rows,
        [Column("peer"), Column("cycles_per_hour", "cycles/h"),
         *(Column(k, f"{k}/h", ",.0f") for k in KINDS.values()),
         *(Column(f"{k}_per_cycle", f"{k}/cycle", ".2f") for k in ("LIST", "GET", "PUT"))],
    )  # fmt: skip
    print(report["delivery"])
    print_table(report["samples"], [Column("at_s"), Column("objects"), Column("bytes")])
    write_json(args.out, {"machine": machine, "options": vars(args) | {"out": str(args.out)},
                          "per_hour": rows, **report})  # fmt: skip
    print("exit codes:", report["exit_codes"])
    agreed = report["agreement"]
    print(
        f"salience: {agreed['identical']} of {agreed['common']} chunks held by every peer "
        f"bit-identical on all of them (largest difference {agreed['max_difference']:.1e})"
    )
    failures = [r for r in report["exactly_once"] if not r["missing"] == r["unexpected"] == 0]
    if failures or not all(report["bit_identical_replay"].values()):
        print("exactly-once or bit-identical replay failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (BenchmarkError, subprocess.CalledProcessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
