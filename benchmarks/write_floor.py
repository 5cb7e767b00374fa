"""write_message latency against the durability floor of the same filesystem.

The floor is a bare 1 KiB append to a file followed by os.fdatasync. convmem's write_message (in-process, 1 KiB of content, small metadata) validates and encodes,
appends its record, indexes it while the record's fdatasync runs on the flusher thread, and
commits it once the flush has returned. Both run in the same process, in the same
directory, interleaved one by one after a warm-up (which goes first alternating), so that they
see the same disk and the same noise. The floor is the cost of the simplest durable append, not a
bound: convmem starts the write-back with sync_file_range and overlaps the fdatasync with
indexing, so on a loaded disk its median can be below the floor's. Reported: median, p99 and
mean of each, and convmem minus floor in microseconds.

    python benchmarks/write_floor.py --count 2000 [--dir DIR] [--save | --json PATH]
--save writes benchmarks/results/write_floor.json; without it nothing is written.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import _paths  # noqa: E402,F401  (corpus.py and convmem on the path)

import corpus  # noqa: E402
import _results  # noqa: E402
from _results import machine_info  # noqa: E402

PAYLOAD_BYTES = 1024
METADATA_JSON = json.dumps({"tags": ["project"], "memory_kind": "semantic", "importance": 70})


def one_kib_texts(n: int, seed: int) -> list[str]:
    """n distinct ASCII texts of exactly 1024 bytes from the corpus vocabulary."""
    rng = np.random.default_rng(seed)
    texts = corpus.vocab().english_texts(rng, [260] * n)
    return [(t + " " + t)[:PAYLOAD_BYTES].encode("ascii", "replace").decode("ascii") for t in texts]


def stats_us(samples: list[float]) -> dict[str, float]:
    a = np.asarray(samples) * 1e6
    return {"median": float(np.median(a)), "p99": float(np.percentile(a, 99)), "mean": float(a.mean()),
            "min": float(a.min())}


def run(count: int, warmup: int, directory: Path, seed: int,
        wrap: Callable[[Any, Path], Any] | None = None) -> dict[str, Any]:
    """`wrap(store, directory)`: what to time in the store's place (gate.py's planted
    regression); None times the store itself."""
    from convmem import MemoryStore

    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    texts = one_kib_texts(count + warmup, seed)
    block = os.urandom(PAYLOAD_BYTES)
    fd = os.open(directory / "floor.bin", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    opened = MemoryStore.open(directory / "store")
    store = opened if wrap is None else wrap(opened, directory)
    floor: list[float] = []
    conv: list[float] = []
    wait: list[float] = []  # a write's wall time less its thread's CPU time: its flush, waited for
    clock, cpu = time.perf_counter, time.thread_time
    try:
        for i in range(count + warmup):
            # Alternate which goes first, so that neither always follows the other's flush (one
            # fdatasync may commit journal entries the other's append left).
            for first in ((True, False) if i % 2 == 0 else (False, True)):
                c0 = cpu()
                t0 = clock()
                if first:
                    os.write(fd, block)
                    os.fdatasync(fd)
                else:
                    res = store.write_message(session_id=f"bench-{i // 100}",
                                              role="user" if i % 2 else "assistant",
                                              content=texts[i], metadata_json=METADATA_JSON)
                    if res.get("status") != "OK":
                        raise RuntimeError(f"write_message failed: {res}")
                t1 = clock()
                c1 = cpu()
                if i >= warmup:
                    (floor if first else conv).append(t1 - t0)
                    if not first:
                        wait.append(max(0.0, (t1 - t0) - (c1 - c0)))
        log_bytes = opened.get_system_health()["log_size"]
    finally:
        opened.close()
        os.close(fd)
    f, c = stats_us(floor), stats_us(conv)
    shutil.rmtree(directory, ignore_errors=True)
    return {"count": count, "payload_bytes": PAYLOAD_BYTES, "directory": str(directory),
            "fdatasync_floor_us": f, "write_message_us": c, "write_message_wait_us": stats_us(wait),
            "difference_us": {"median": c["median"] - f["median"], "p99": c["p99"] - f["p99"],
                              "mean": c["mean"] - f["mean"]},
            "convmem_log_bytes_per_write": log_bytes / (count + warmup),
            "machine": machine_info()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="write_message latency against append + fdatasync")
    p.add_argument("--count", type=int, default=2000)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--dir", default=str(corpus.DATA_DIR / "write_floor"))
    _results.add_output_args(p, "write_floor.json")
    args = p.parse_args(argv)
    if args.count <= 0 or args.warmup < 0:
        p.error("--count must be positive and --warmup >= 0")
    out = _results.output_path(args, "write_floor.json")
    _results.refuse_debug_build("write_floor.py")
    r = run(args.count, args.warmup, Path(args.dir), args.seed)
    f, c, d = r["fdatasync_floor_us"], r["write_message_us"], r["difference_us"]
    print(f"{r['count']} writes of {PAYLOAD_BYTES} B in {r['directory']} "
          f"(convmem log grows {r['convmem_log_bytes_per_write']:.0f} B per write)")
    print(f"{'':<30}{'median us':>12}{'p99 us':>12}{'mean us':>12}")
    print(f"{'append + fdatasync (floor)':<30}{f['median']:>12.1f}{f['p99']:>12.1f}{f['mean']:>12.1f}")
    print(f"{'convmem write_message':<30}{c['median']:>12.1f}{c['p99']:>12.1f}{c['mean']:>12.1f}")
    print(f"{'difference':<30}{d['median']:>12.1f}{d['p99']:>12.1f}{d['mean']:>12.1f}")
    _results.write_json(out, r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
