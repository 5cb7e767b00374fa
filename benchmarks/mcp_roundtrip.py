"""MCP over stdio on an existing store: cold start and search round trips, through the SDK client.

    python benchmarks/mcp_roundtrip.py --data-dir DIR --messages N [--queries 500]

Spawns `python -m convmem serve --data-dir DIR` (the store must exist, e.g. built by
compare_fts5.py --keep-stores or `convmem import`), and reports: spawn to the first answered
request (initialize + get_system_health), then the median and p99 of search_messages round trips
(the seeded query set for N messages, one after the other on one session; the time includes the
SDK client and the parse of the result's JSON text with orjson), and the client process's CPU
time per round trip (the SDK client's share). Also the same cold start on an empty store, for
comparison. `--mode auto` uses the SDK client's default protocol era (2026-07-28, no
`initialize`) instead of the `initialize` handshake most hosts use today. `--settle S` waits S
seconds after the first answer before the round trips: a large store checks its log's checksums
in a background thread for a while after opening (~0.4 s of CPU at 1M messages), which otherwise
competes with the first few hundred queries.
"""
from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
import orjson
from mcp import Client, StdioServerParameters

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _paths  # noqa: E402  (corpus.py and convmem on the path)
import _results  # noqa: E402
import corpus  # noqa: E402


def params(data_dir: str) -> StdioServerParameters:
    env = {"PYTHONPATH": _paths.convmem_pythonpath()}
    return StdioServerParameters(command=sys.executable,
                                 args=["-P", "-m", "convmem", "serve", "--data-dir", data_dir], env=env)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def measure(data_dir: str, queries: list[dict], mode: str, settle: float) -> dict[str, float]:
    t0 = time.perf_counter()
    async with Client(params(data_dir), mode=mode) as client:
        await client.call_tool("get_system_health", {})
        cold = time.perf_counter() - t0
        await anyio.sleep(settle)
        times = []
        cpu0 = cpu_seconds()
        for q in queries:
            a = time.perf_counter()
            r = await client.call_tool("search_messages", q)
            orjson.loads(r.content[0].text)
            times.append(time.perf_counter() - a)
        cpu = cpu_seconds() - cpu0
    out = {"cold_start_s": round(cold, 3)}
    if times:
        times.sort()
        out.update(search_p50_ms=round(statistics.median(times) * 1e3, 3),
                   search_p99_ms=round(times[int(len(times) * 0.99)] * 1e3, 3),
                   client_cpu_ms_per_query=round(cpu / len(times) * 1e3, 3), queries=len(times))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--messages", type=int, required=True, help="size of the corpus in the store")
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--mode", choices=("legacy", "auto"), default="legacy",
                    help="SDK client protocol era: legacy = initialize handshake (default)")
    ap.add_argument("--settle", type=float, default=0.0, help="seconds to wait before the round trips")
    args = ap.parse_args()
    if args.queries <= 0:
        ap.error("--queries must be positive")
    _results.refuse_debug_build("mcp_roundtrip.py")
    _results.existing_store(args.data_dir, args.messages)  # before spawning anything
    queries = corpus.make_queries(args.queries, 1, args.messages)
    with tempfile.TemporaryDirectory() as empty:
        print("empty store:", anyio.run(measure, empty, [], args.mode, 0.0))
    print(f"{args.messages} messages:", anyio.run(measure, args.data_dir, queries, args.mode, args.settle),
          _results.machine_info())


if __name__ == "__main__":
    main()
