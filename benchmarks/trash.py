"""The trash (admin toolset): list_deleted and restore_message on a store with many deletions.

    python benchmarks/trash.py [--messages 100000] [--deleted 10000] [--rounds 200]
                               [--data-dir /tmp/convmem-bench-trash] [--results FILE]

Builds a store of `messages` messages (1 KiB each, 100 sessions) under `--data-dir` (a new
directory, removed afterwards unless --keep), deletes `deleted` of them at random, then, over
`rounds` rounds each, times side by side:

- delete_message of a live message (the trash's append), against update_message of one (the
  same write protocol, one fdatasync each): p50 and their ratio;
- restore_message of a deleted message against update_message: p50 and ratio;
- list_deleted, the first page (limit 100) of the whole trash, and of one session's;
- list_deleted, a page from a cursor in the middle of the trash;
- open (a fresh MemoryStore.open of the store, snapshot written at close: the trash sections load
  with it), and the trash's bytes in memory.

Results print as one JSON object (and a table); --results writes the JSON to FILE. Nothing here
is a test, and it writes no tracked file.
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _paths  # noqa: E402,F401  (convmem on the path)

from convmem import MemoryStore  # noqa: E402
from convmem._core import CORE_KIND  # noqa: E402


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def p50(values: list[float]) -> float:
    return statistics.median(values)


def build(path: Path, n: int, rng: random.Random) -> list[str]:
    words = "alpha beta gamma delta memory search restore trash session 東京 会議 設定".split()
    with MemoryStore.open(path) as s:
        batch = []
        for i in range(n):
            text = " ".join(rng.choice(words) for _ in range(160))[:1024]
            batch.append({"session_id": f"s{i % 100}", "role": "user", "content": text})
        s.import_messages(batch, batch_size=5000)
        ids = [m["message_id"] for m in s.export_messages()]
    return ids


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--deleted", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--data-dir", type=Path, default=Path("/tmp/convmem-bench-trash"))
    ap.add_argument("--keep", action="store_true", help="leave the store in place")
    ap.add_argument("--results", type=Path, default=None, help="write the JSON result here")
    args = ap.parse_args()
    if args.data_dir.exists():
        sys.exit(f"{args.data_dir} exists; give a new --data-dir")
    rng = random.Random(12)
    t0 = time.perf_counter()
    ids = build(args.data_dir, args.messages, rng)
    build_s = time.perf_counter() - t0
    rng.shuffle(ids)
    doomed, live = ids[:args.deleted], ids[args.deleted:]
    out: dict[str, Any] = {"core": CORE_KIND, "messages": args.messages, "deleted": args.deleted,
                           "rounds": args.rounds, "build_s": round(build_s, 1)}
    try:
        with MemoryStore.open(args.data_dir) as s:
            for mid in doomed:
                s.delete_message(message_id=mid)
        t0 = time.perf_counter()
        s = MemoryStore.open(args.data_dir)
        out["open_ms"] = round((time.perf_counter() - t0) * 1000, 1)
        try:
            out["trash_bytes"] = s._catalog.trash.nbytes  # noqa: SLF001 (what the trash holds)
            k = args.rounds
            updates, deletes, restores = [], [], []
            targets = iter(live)
            restorable = list(doomed)
            rng.shuffle(restorable)
            for i in range(k):
                # Interleaved, so drifts of the machine hit all three alike.
                upd = next(targets)
                updates.append(timed(lambda: s.update_message(message_id=upd, content=f"updated {i}")))
                gone = next(targets)
                deletes.append(timed(lambda: s.delete_message(message_id=gone)))
                back = restorable.pop()
                restores.append(timed(lambda: s.restore_message(message_id=back)))
            out["update_p50_ms"] = round(p50(updates), 3)
            out["delete_p50_ms"] = round(p50(deletes), 3)
            out["restore_p50_ms"] = round(p50(restores), 3)
            out["delete_over_update"] = round(p50(deletes) / p50(updates), 3)
            out["restore_over_update"] = round(p50(restores) / p50(updates), 3)
            first = [timed(lambda: s.list_deleted(limit=100)) for _ in range(k)]
            session = [timed(lambda: s.list_deleted(limit=100, session_id="s7")) for _ in range(k)]
            middle_cursor = None
            page = s.list_deleted(limit=1000)
            for _ in range(max(0, args.deleted // 2000)):
                middle_cursor = page.get("nextCursor")
                if middle_cursor is None:
                    break
                page = s.list_deleted(limit=1000, cursor=middle_cursor)
            middle = [timed(lambda: s.list_deleted(limit=100, cursor=middle_cursor)) for _ in range(k)]
            out["list_first_page_p50_ms"] = round(p50(first), 3)
            out["list_session_page_p50_ms"] = round(p50(session), 3)
            out["list_middle_page_p50_ms"] = round(p50(middle), 3)
            out["total_deleted"] = s.list_deleted(limit=1)["total_deleted"]
        finally:
            s.close()
    finally:
        if not args.keep:
            shutil.rmtree(args.data_dir, ignore_errors=True)
    text = json.dumps(out)
    print(text)
    for key, value in out.items():
        print(f"  {key:28} {value}", file=sys.stderr)
    if args.results is not None:
        args.results.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
