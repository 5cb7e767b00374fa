"""Bulk import of the seeded corpus (`MemoryStore.import_messages`) as the product does it, and
with one of its levers undone, side by side. Modes:
- `paused`: the product: the cyclic garbage collector paused (api/gc_pause.py), each batch
  indexed on a thread of its own while the next batches are read, checked and written
  (Catalog.apply_new_batch(settle_later=True));
- `on`: the collector left running;
- `serial`: each batch indexed (still on its thread, beside the batch's other structures)
  before the import reads the next one, as before the pipeline;
- `cli`: the command a user runs, `convmem import --data-dir STORE corpus.jsonl` (the JSON Lines
  importer: orjson, ids derived from the lines, existing ids compared), timed as a whole
  process: its import_s holds the interpreter's start and the close with its final snapshot
  (close_s and gc_s are not measured apart: null).

Each round runs one fresh child process a mode, alternating, so that both see the same machine
noise; each imports the cached corpus of `--messages` (generated first if missing) into an empty
store, closes it (the final snapshot included) and reports the import's wall time, the time the
collector's passes took (gc.callbacks) and the process's peak RSS. The medians over rounds and
the ratio are printed as JSON.

    python benchmarks/import_scale.py --messages 1000000 --rounds 2
    python benchmarks/import_scale.py --messages 1000000 --rounds 2 --modes paused,serial
    python benchmarks/import_scale.py --messages 10000000 --rounds 1 --modes paused
    python benchmarks/import_scale.py --messages 10000000 --rounds 1 --modes cli

With two modes, `ratio` is the first's import time over the second's (medians).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _paths

MODES = ("paused", "on", "serial", "cli")

CHILD = r"""
import contextlib, gc, json, resource, sys, time
import corpus
from convmem import MemoryStore
from convmem.api import gc_pause
src, store_dir, mode = sys.argv[1], sys.argv[2], sys.argv[3]
if mode == "on":
    gc_pause.paused = contextlib.nullcontext  # the collector runs as it would without the pause
if mode == "serial":
    from convmem.catalog.catalog import Catalog
    pipelined = Catalog.apply_new_batch
    def serial(self, *args, settle_later=False):  # (the batch indexed before the call returns)
        return pipelined(self, *args, settle_later=False)
    Catalog.apply_new_batch = serial
passes = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}
started = [0.0]
def timed(phase, info):
    if phase == "start":
        started[0] = time.perf_counter()
    else:
        p = passes[info["generation"]]
        p[0] += 1
        p[1] += time.perf_counter() - started[0]
gc.callbacks.append(timed)
st = MemoryStore.open(store_dir)
t0 = time.perf_counter()
n = st.import_messages(corpus.read_corpus(src), batch_size=1000)
t1 = time.perf_counter()
st.close()
t2 = time.perf_counter()
print(json.dumps({"messages": n, "import_s": t1 - t0, "close_s": t2 - t1,
                  "gc_s": sum(p[1] for p in passes.values()),
                  "gc_passes": {g: p[0] for g, p in passes.items()},
                  "rss_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "minor_faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt}))
"""


def run_child(src: Path, tmp: Path, mode: str) -> dict:
    store_dir = Path(tempfile.mkdtemp(prefix="cm-import-", dir=tmp))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(_paths.HERE),
                                                       _paths.convmem_pythonpath()]))
    try:
        if mode == "cli":
            return run_cli(src, store_dir, env)
        out = subprocess.run([sys.executable, "-c", CHILD, str(src), str(store_dir), mode],
                             env=env, capture_output=True, text=True, check=True).stdout
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)
    return json.loads(out.strip().splitlines()[-1])


def run_cli(src: Path, store_dir: Path, env: dict[str, str]) -> dict:
    """`convmem import` as a process of its own: wall time from spawn to exit, its rusage."""
    cmd = [sys.executable, "-m", "convmem", "import", "--data-dir", str(store_dir / "s"), str(src)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"convmem import failed ({proc.returncode}): {err.decode()[-2000:]}")
    n = int(out.decode().split("imported ")[1].split()[0])
    return {"messages": n, "import_s": wall, "close_s": None, "gc_s": None,
            "rss_peak_mb": usage.ru_maxrss / 1024, "minor_faults": usage.ru_minflt}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    import corpus
    corpus.add_run_options(ap, "where the stores go (default: the benchmark data directory)")
    ap.add_argument("--modes", default="paused,on", help="a comma list of paused (the product's "
                    "import_messages), on, serial and cli (the convmem import command); "
                    "default paused,on")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in MODES for m in modes):
        ap.error(f"--modes takes {', '.join(MODES)}")
    tmp = args.tmp or _paths.data_dir()
    tmp.mkdir(parents=True, exist_ok=True)
    src = corpus.ensure_corpus(args.messages, args.seed)
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    for r in range(args.rounds):
        for m in modes:
            res = run_child(src, tmp, m)
            runs[m].append(res)
            parts = "" if m == "cli" else (f", gc {res['gc_s']:.2f} s, "
                                            f"close {res['close_s']:.1f} s")
            print(f"round {r + 1} {m}: import {res['import_s']:.1f} s{parts}, RSS peak "
                  f"{res['rss_peak_mb']:.0f} MB, {res['minor_faults']} minor faults",
                  file=sys.stderr)
    summary: dict = {"messages": args.messages, "rounds": args.rounds, "commit": _paths.commit(),
                     "modes": {}}
    for m, rs in runs.items():
        summary["modes"][m] = {k: (statistics.median(x[k] for x in rs) if rs[0][k] is not None
                                   else None)
                               for k in ("import_s", "close_s", "gc_s", "rss_peak_mb")}
        summary["modes"][m]["runs"] = rs
    if len(modes) == 2:
        a, b = (summary["modes"][m]["import_s"] for m in modes)
        summary["ratio"] = {"of": f"{modes[0]} / {modes[1]}", "import_s": a / b}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
