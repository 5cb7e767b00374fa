"""Import throughput on Claude Code transcripts: messages/s through the importer and the store.

Generates a seeded project folder of realistic transcripts (user prompts, assistant answers split
in blocks sharing message.id, tool calls and results, injected context, thinking, progress lines)
and times `run_import` into an empty store (parsing, derived ids, batching and fdatasync
included), then a second pass over the same files (everything already present).

    python benchmarks/bench_import.py --messages 200000
"""
from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path

import orjson

import _paths  # noqa: F401 - the source tree first

from convmem import MemoryStore
from convmem.importers.common import Options
from convmem.importers.runner import run_import
from convmem.importers.sources import expand

WORDS = ("the checkout total cart fixture test make build deploy release database migration "
         "python error line file module function import returns value config log level debug").split()


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def write_transcripts(folder: Path, messages: int, per_session: int, seed: int) -> int:
    """Writes transcripts holding about `messages` imported messages; returns the lines written."""
    rng = random.Random(seed)
    project = folder / "-home-bench-src"
    project.mkdir(parents=True)
    lines = 0
    made = 0
    s = 0
    while made < messages:
        sid = f"{s:08x}-0000-4000-8000-{s:012x}"
        out = []
        t = 1772438400000 + s * 3_600_000
        k = 0
        while k < per_session and made < messages:
            def row(kind: str, msg: dict, **extra: object) -> bytes:
                nonlocal t, k
                t += rng.randint(200, 4000)
                k += 1
                r = {"parentUuid": None, "isSidechain": False, "type": kind, "sessionId": sid,
                     "uuid": f"{s:08x}-{k:04x}-4000-8000-{rng.getrandbits(48):012x}",
                     "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t // 1000)) + f".{t % 1000:03d}Z",
                     "cwd": "/home/bench/src", "gitBranch": "main", "version": "2.1.44", "message": msg}
                r.update(extra)
                return orjson.dumps(r) + b"\n"
            out.append(row("user", {"role": "user", "content": sentence(rng, rng.randint(6, 40))}))
            mid = f"msg_{s:06x}{k:06x}"
            out.append(row("assistant", {"id": mid, "role": "assistant", "content": [{"type": "thinking", "thinking": sentence(rng, 20)}]}))
            out.append(row("assistant", {"id": mid, "role": "assistant", "content": [{"type": "text", "text": sentence(rng, rng.randint(10, 80))}]}))
            tid = f"toolu_{s:06x}{k:06x}"
            out.append(row("assistant", {"id": mid, "role": "assistant", "content": [{"type": "tool_use", "id": tid, "name": "Bash", "input": {"command": "make test"}}]}))
            out.append(orjson.dumps({"type": "progress", "sessionId": sid, "data": {"type": "bash_progress"}}) + b"\n")
            out.append(row("user", {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid, "content": sentence(rng, rng.randint(10, 200))}]}))
            out.append(row("assistant", {"id": mid + "b", "role": "assistant", "content": [{"type": "text", "text": sentence(rng, rng.randint(10, 60))}]}))
            made += 5  # prompt, merged answer, tool call, tool result, second answer
        (project / f"{sid}.jsonl").write_bytes(b"".join(out))
        lines += len(out)
        s += 1
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--per-session", type=int, default=2_000)
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="convmem-bench-import-"))
    try:
        lines = write_transcripts(work / "projects", args.messages, args.per_session, args.seed)
        size = sum(p.stat().st_size for p in (work / "projects").rglob("*.jsonl"))
        with MemoryStore.open(work / "data") as store:
            for label in ("first import", "again (all present)"):
                problems: list = []
                sources = expand(str(work / "projects"), None, problems)
                t0 = time.perf_counter()
                reports = run_import(store, sources, Options())
                dt = time.perf_counter() - t0
                imported = sum(r.imported for r in reports)
                present = sum(r.present for r in reports)
                print(f"{label}: {len(sources)} files, {lines} lines, {size / 1e6:.1f} MB: "
                      f"{imported} imported, {present} present in {dt:.2f} s = "
                      f"{(imported + present) / dt:,.0f} messages/s, {lines / dt:,.0f} lines/s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
