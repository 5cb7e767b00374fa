"""The stdio relay: spawn to first answer with an owner running, and the search round trip
through a relay against the owner's own (direct) stdio, on one store.

    python benchmarks/relay_latency.py --data-dir DIR --messages N [--spawns 20] [--queries 500]

1. Spawn to first answer: `python -m convmem serve` is spawned with an owner running (it becomes a
   byte relay), sent `initialize`, and timed until the answer line arrives; then the same on a
   copy-free empty store with no owner (the process opens the store itself and imports the SDK),
   paired spawn by spawn. Medians over --spawns.
2. Search round trip: the owner (a `serve` that opened DIR) and a relay attached to it each answer
   the seeded query set for N messages, alternating query by query (paired, same cache state),
   with raw JSON-RPC lines over pipes (no SDK client in the measure). Median and p99 of each, and
   the median of the per-query difference.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _paths  # noqa: E402
import _results  # noqa: E402
import corpus  # noqa: E402

INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}}


class Host:
    def __init__(self, data_dir: str) -> None:
        env = dict(os.environ, PYTHONPATH=_paths.convmem_pythonpath())
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, "-P", "-m", "convmem", "serve", "--data-dir", data_dir],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=env, bufsize=0)
        self.n = 0

    def send(self, message: dict) -> None:
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")

    def initialize(self) -> float:
        self.send(INIT)
        self.proc.stdout.readline()
        first = time.perf_counter() - self.t0
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return first

    def call(self, name: str, arguments: dict) -> bytes:
        self.n += 1
        self.send({"jsonrpc": "2.0", "id": self.n, "method": "tools/call",
                   "params": {"name": name, "arguments": arguments}})
        return self.proc.stdout.readline()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def median_ms(xs: list[float]) -> float:
    return round(statistics.median(xs) * 1e3, 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--messages", type=int, required=True)
    ap.add_argument("--spawns", type=int, default=20)
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--settle", type=float, default=5.0, help="seconds after opening before measuring")
    args = ap.parse_args()
    _results.refuse_debug_build("relay_latency.py")
    _results.existing_store(args.data_dir, args.messages)  # before spawning anything
    owner = Host(args.data_dir)
    print(f"owner opened {args.messages} messages: first answer after {owner.initialize():.3f} s", flush=True)
    owner.call("get_system_health", {})
    time.sleep(args.settle)
    relayed, alone = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.spawns):
            h = Host(args.data_dir)
            relayed.append(h.initialize())
            h.close()
            empty = Path(tmp) / f"e{i}"
            h = Host(str(empty))
            alone.append(h.initialize())
            h.close()
    print(f"spawn to first answer (initialize), median of {args.spawns}: relay to a running owner "
          f"{median_ms(relayed)} ms; a serve opening an empty store with no owner {median_ms(alone)} ms")
    relay = Host(args.data_dir)
    relay.initialize()
    queries = corpus.make_queries(args.queries, 1, args.messages)
    for q in queries[:20]:  # warm both
        owner.call("search_messages", q)
        relay.call("search_messages", q)
    direct_t, relay_t, diffs = [], [], []
    for i, q in enumerate(queries):
        order = (owner, relay) if i % 2 == 0 else (relay, owner)
        got = {}
        for h in order:
            a = time.perf_counter()
            h.call("search_messages", q)
            got[h] = time.perf_counter() - a
        direct_t.append(got[owner])
        relay_t.append(got[relay])
        diffs.append(got[relay] - got[owner])
    p99 = lambda xs: round(sorted(xs)[int(len(xs) * 0.99)] * 1e3, 3)  # noqa: E731
    print(f"search round trip at {args.messages} messages, {len(queries)} queries, paired: direct "
          f"p50 {median_ms(direct_t)} ms p99 {p99(direct_t)} ms; through a relay p50 {median_ms(relay_t)} ms "
          f"p99 {p99(relay_t)} ms; median difference {median_ms(diffs)} ms")
    relay.close()
    owner.close()


if __name__ == "__main__":
    main()
