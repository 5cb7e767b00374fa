"""What every benchmark script records and where it writes it.

Committed results (benchmarks/results/*.json, behind the README's tables and plot) change only
when asked: `--save` writes the script's committed file, `--json PATH` writes anywhere else, and
without either the script only prints. Every file records the run: commit, core (compiled or
pure-python), build (release or debug) and where the core was loaded from, beside the sizes the
script puts in it.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS_DIR = HERE / "results"
sys.path.insert(0, str(HERE))
import _paths  # noqa: E402  (convmem on the path, the commit)


def machine_info() -> dict[str, Any]:
    """The machine, the commit and the core of this run ("unknown" for what a checkout older
    than these labels does not say: the scripts also measure older code, PYTHONPATH choosing)."""
    import convmem._core as core
    CORE_KIND, BUILD_TYPE, CORE_PATH = (getattr(core, name, "unknown") for name in (
        "CORE_KIND", "BUILD_TYPE", "CORE_PATH"))
    return {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version,
            "cpus": os.cpu_count(), "machine": platform.machine(), "commit": _paths.commit(),
            "core": CORE_KIND, "build": BUILD_TYPE, "core_path": CORE_PATH,
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def add_output_args(p: argparse.ArgumentParser, committed: str) -> None:
    p.add_argument("--save", action="store_true",
                   help=f"write the committed results file benchmarks/results/{committed}")
    p.add_argument("--json", default=None, metavar="PATH",
                   help="write the results as JSON here (any path; the committed file is untouched)")


def output_path(args: argparse.Namespace, committed: str) -> Path | None:
    if args.save and args.json:
        raise SystemExit("--save and --json are exclusive")
    if args.save:
        return RESULTS_DIR / committed
    return Path(args.json) if args.json else None


def write_json(path: Path | None, data: dict[str, Any]) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    os.replace(tmp, path)
    print(f"wrote {path}", file=sys.stderr)


def refuse_debug_build(script: str) -> None:
    """Timing scripts measure release builds only: a debug (or -O0) core runs many times
    slower and would be published as convmem's speed. CONVMEM_BENCH_ALLOW_DEBUG=1 overrides
    (the results then say build: debug)."""
    import convmem._core as core
    # A checkout older than BUILD_TYPE has no debug build to refuse (nothing to say it is one).
    BUILD_TYPE, CORE_PATH = getattr(core, "BUILD_TYPE", "unknown"), getattr(core, "CORE_PATH", "?")
    DEBUG_MODULES = getattr(core, "DEBUG_MODULES", ())
    if BUILD_TYPE == "debug" and os.environ.get("CONVMEM_BENCH_ALLOW_DEBUG", "") in ("", "0"):
        raise SystemExit(f"{script}: the core at {CORE_PATH} is a debug build "
                         f"({', '.join(DEBUG_MODULES)}): rebuild it (rm convmem/_core/*.c; "
                         "python setup.py build_ext --inplace) or set CONVMEM_BENCH_ALLOW_DEBUG=1")


def parse_sizes(text: str, name: str = "--sizes") -> list[int]:
    """"10000,100000" -> [10000, 100000]; anything else is an error before any work."""
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise SystemExit(f"{name} must be comma-separated positive integers, not {text!r}") from None
    if not sizes or any(s <= 0 for s in sizes):
        raise SystemExit(f"{name} must be comma-separated positive integers, not {text!r}")
    return sizes


def existing_store(path: str | Path, messages: int | None = None) -> int:
    """The number of messages in the store at `path`, checked before any work: a missing
    directory or one without a store's log is an error (not an empty store to measure), and so
    is a store whose size is not the `messages` the figures will be labelled with."""
    from convmem import MemoryStore
    from convmem.store.logfile import LOG_NAME

    p = Path(path)
    if not p.is_dir():
        raise SystemExit(f"{p}: no such store directory (build one first, e.g. convmem import "
                         "or compare_fts5.py --keep-stores)")
    if not (p / LOG_NAME).is_file():
        raise SystemExit(f"{p}: not a convmem store (no {LOG_NAME})")
    with MemoryStore.open(p) as store:
        n = int(store.get_system_health()["active_messages"])
    if messages is not None and n != messages:
        raise SystemExit(f"{p} holds {n} messages, not the {messages} of --messages")
    return n
