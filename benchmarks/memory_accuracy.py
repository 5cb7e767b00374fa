"""How close is get_system_health()["memory_estimate"] to what tracemalloc sees?

For each corpus size, a fresh subprocess starts tracemalloc after its imports, then either imports
the corpus into a new store ("import") or opens that store again from its snapshot and log
("reopen"). It collects garbage, takes a snapshot and compares, per category and in total,
memory_estimate against the bytes tracemalloc traced, as the ratio estimate / traced.

Attributing traced bytes to the estimate's categories: each allocation's traceback (up to 24
frames) is searched for convmem frames:
- a frame in convmem/catalog/sessions.py -> history_index_bytes,
- a frame in convmem/catalog/relations.py -> relation_index_bytes,
- a frame on a line of convmem/catalog/catalog.py that calls the compiled search index
  (`self.index.*`, `index.*`, `core_index.*`, `new_index.*`; compiled code has no frames of its own, so its allocations show up
  on the calling line) -> "index" = metadata_bytes + search_index_bytes (the index reports its
  document columns as metadata and its postings/terms as search index; tracemalloc cannot split
  one call into the two),
- any other frame in convmem/ -> store_entries_bytes (slot/doc columns, the id dict), unless it is
  the log/snapshot I/O code (convmem/store/), which is reported as "store_io" (not estimated),
- no convmem frame at all -> "outside" (interpreter, test harness; reported, not compared).
Bodies are not held in memory by the store (body_bytes is 0), so they have no category here.

A reopened store maps its snapshot file (mmap) and uses the arrays in place: those bytes are not
heap allocations and tracemalloc cannot see them. The script therefore also reports the mappings
of files inside the store directory (/proc/self/smaps: mapped size and resident bytes, per file),
and the total ratio estimate / (convmem-traced + mapped snapshot). A mapping of the log holds
message bodies, which the estimate leaves out by design (body_bytes), so it is shown, not added.
Per category, the snapshot's sections are attributed by name (ix.* index, hist_* and kind_counts
history, rel_* relations, the rest store entries) and compared as estimate / (traced + sections).

    python benchmarks/memory_accuracy.py --sizes 10000,100000
Writes benchmarks/results/memory_accuracy.json.
"""
from __future__ import annotations

import argparse
import ast
import gc
import json
import shutil
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import _paths  # noqa: E402,F401  (corpus.py and convmem on the path)

import corpus  # noqa: E402
from compare_fts5 import RESULTS_DIR, machine_info  # noqa: E402

API_FILE = ROOT / "convmem" / "catalog" / "catalog.py"
INDEX_CALL_PREFIXES = ("self.index.", "index.", "core_index.", "new_index.", "cat.index.")
CATEGORIES = ("store_entries_bytes", "history_index_bytes", "relation_index_bytes", "index")


def index_call_lines(path: Path = API_FILE) -> set[int]:
    """Line numbers of catalog.py that lie inside a call into the compiled search index."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = ast.unparse(node.func)
            if func.startswith(INDEX_CALL_PREFIXES):
                lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def classify(frames: list[tuple[str, int]], index_lines: set[int]) -> str:
    """The estimate category of one allocation, from its traceback (innermost frame first)."""
    convmem_frames = [(f.replace("\\", "/"), n) for f, n in frames if "/convmem/" in f.replace("\\", "/")]
    if not convmem_frames:
        return "outside"
    for f, _ in convmem_frames:
        if f.endswith("convmem/catalog/sessions.py"):
            return "history_index_bytes"
        if f.endswith("convmem/catalog/relations.py"):
            return "relation_index_bytes"
    for f, n in convmem_frames:
        if f.endswith("convmem/catalog/catalog.py") and n in index_lines:
            return "index"
    if any("/convmem/store/" in f for f, _ in convmem_frames[:1]):
        return "store_io"
    return "store_entries_bytes"


def store_mappings(store_dir: Path) -> dict[str, Any]:
    """Mapped size and resident bytes (/proc/self/smaps) of files under store_dir, and per file."""
    root = str(store_dir.resolve())
    per_file: dict[str, int] = {}
    size_kb = rss_kb = 0
    current = ""
    try:
        with open("/proc/self/smaps", encoding="utf-8", errors="replace") as f:
            for line in f:
                head = line.split(maxsplit=5)
                if head and "-" in head[0] and not head[0].endswith(":"):
                    path = head[5].strip() if len(head) == 6 else ""
                    current = Path(path).name if path.startswith(root) else ""
                elif current and head[0] == "Size:":
                    size_kb += int(head[1])
                    per_file[current] = per_file.get(current, 0) + int(head[1]) * 1024
                elif current and head[0] == "Rss:":
                    rss_kb += int(head[1])
    except OSError:
        return {"mapped_bytes": -1, "mapped_resident_bytes": -1, "mapped_files": {}}
    return {"mapped_bytes": size_kb * 1024, "mapped_resident_bytes": rss_kb * 1024,
            "mapped_files": per_file}


def section_category(name: str) -> str:
    """The estimate category of a snapshot section (docs/FORMAT.md "Snapshot file")."""
    if name.startswith("ix."):
        return "index"
    if name.startswith("hist_") or name == "kind_counts":
        return "history_index_bytes"
    if name.startswith("rel_"):
        return "relation_index_bytes"
    return "store_entries_bytes"  # slot_*, doc_*, slot_ulid, id_table


def snapshot_sections_by_category(store_dir: Path) -> dict[str, int]:
    """Bytes of the snapshot's sections, by estimate category (what a reopened store maps and
    uses in place; tracemalloc sees none of it)."""
    from convmem.store.snapshot import SNAPSHOT_NAME, read_snapshot
    out = dict.fromkeys(CATEGORIES, 0)
    try:
        meta, _ = read_snapshot(store_dir / SNAPSHOT_NAME, verify=False)
    except (OSError, ValueError):
        return out
    for entry in meta["sections"]:
        out[section_category(entry["name"])] += int(entry["nbytes"])
    return out


def measure(phase: str, corpus_file: Path, store_dir: Path) -> dict[str, Any]:
    """Run in a fresh interpreter: trace one phase, compare the estimate with traced bytes."""
    from convmem import MemoryStore

    index_lines = index_call_lines()
    if phase == "import":
        shutil.rmtree(store_dir, ignore_errors=True)
    gc.collect()
    tracemalloc.start(24)
    t0 = time.perf_counter()
    store = MemoryStore.open(store_dir)
    if phase == "import":
        store.import_messages(corpus.read_corpus(corpus_file), batch_size=1000)
    elapsed = time.perf_counter() - t0
    gc.collect()
    snap = tracemalloc.take_snapshot()
    traced_current, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    health = store.get_system_health()
    est = health["memory_estimate"]
    mapped = store_mappings(store_dir)
    traced = dict.fromkeys((*CATEGORIES, "store_io", "outside"), 0)
    for trace in snap.traces:
        frames = [(fr.filename, fr.lineno) for fr in trace.traceback]
        traced[classify(frames, index_lines)] += trace.size
    estimate = {
        "store_entries_bytes": est["store_entries_bytes"],
        "history_index_bytes": est["history_index_bytes"],
        "relation_index_bytes": est["relation_index_bytes"],
        "index": est["metadata_bytes"] + est["search_index_bytes"],
    }
    convmem_traced = sum(traced[c] for c in (*CATEGORIES, "store_io"))
    out = {
        "phase": phase, "seconds_under_tracemalloc": elapsed,
        "active_messages": health["active_messages"], "memory_estimate": est,
        "traced_by_category": traced, "traced_current": traced_current, "traced_peak": traced_peak,
        **mapped,
        "ratio_estimate_over_traced": {
            c: (estimate[c] / traced[c] if traced[c] else None) for c in CATEGORIES},
    }
    out["ratio_estimate_over_traced"]["total_vs_convmem_attributed"] = est["total_bytes"] / convmem_traced
    out["ratio_estimate_over_traced"]["total_vs_all_traced"] = est["total_bytes"] / traced_current
    snapshot_mapped = sum(b for name, b in mapped["mapped_files"].items() if name.startswith("snapshot"))
    out["snapshot_mapped_bytes"] = snapshot_mapped
    # Per category, a reopened store's arrays are traced (copied or built) or mapped (used in
    # place); a section both mapped and copied (loaded into structures of their own, as the
    # sessions' histories are) counts twice here, so a category below 1 may be that.
    sections = snapshot_sections_by_category(store_dir) if snapshot_mapped else dict.fromkeys(CATEGORIES, 0)
    out["snapshot_sections_by_category"] = sections
    out["ratio_estimate_over_traced_plus_sections"] = {
        c: (estimate[c] / (traced[c] + sections[c]) if traced[c] + sections[c] else None)
        for c in CATEGORIES}
    if mapped["mapped_bytes"] >= 0:
        out["ratio_estimate_over_traced"]["total_vs_convmem_traced_plus_mapped"] = (
            est["total_bytes"] / (convmem_traced + snapshot_mapped))
    store.close()
    return out


def run_phase(phase: str, corpus_file: Path, store_dir: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, "_measure", phase, str(corpus_file), str(store_dir)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"memory_accuracy {phase} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def print_result(size: int, r: dict[str, Any]) -> None:
    print(f"\n== {size:,} messages, {r['phase']} ({r['seconds_under_tracemalloc']:.1f} s under tracemalloc) ==")
    est = r["memory_estimate"]
    est_cat = {"store_entries_bytes": est["store_entries_bytes"],
               "history_index_bytes": est["history_index_bytes"],
               "relation_index_bytes": est["relation_index_bytes"],
               "index": est["metadata_bytes"] + est["search_index_bytes"]}
    print(f"{'category':<34}{'estimate MB':>13}{'traced MB':>13}{'est/traced':>12}"
          f"{'mapped MB':>12}{'est/(t+m)':>11}")
    sections = r.get("snapshot_sections_by_category", {})
    for c in CATEGORIES:
        ratio = r["ratio_estimate_over_traced"][c]
        both = r.get("ratio_estimate_over_traced_plus_sections", {}).get(c)
        print(f"{c:<34}{est_cat[c] / 1e6:>13.2f}{r['traced_by_category'][c] / 1e6:>13.2f}"
              f"{(f'{ratio:.3f}' if ratio is not None else '-'):>12}"
              f"{sections.get(c, 0) / 1e6:>12.2f}{(f'{both:.3f}' if both is not None else '-'):>11}")
    for c in ("store_io", "outside"):
        print(f"{c + ' (not estimated)':<34}{'':>13}{r['traced_by_category'][c] / 1e6:>13.2f}")
    ratios = r["ratio_estimate_over_traced"]
    print(f"{'total: estimate / convmem-traced':<34}{est['total_bytes'] / 1e6:>13.2f}"
          f"{sum(r['traced_by_category'][c] for c in (*CATEGORIES, 'store_io')) / 1e6:>13.2f}"
          f"{ratios['total_vs_convmem_attributed']:>12.3f}")
    print(f"{'total: estimate / all traced':<34}{est['total_bytes'] / 1e6:>13.2f}"
          f"{r['traced_current'] / 1e6:>13.2f}{ratios['total_vs_all_traced']:>12.3f}")
    if "total_vs_convmem_traced_plus_mapped" in ratios:
        both = sum(r["traced_by_category"][c] for c in (*CATEGORIES, "store_io")) + r["snapshot_mapped_bytes"]
        for name, nbytes in sorted(r["mapped_files"].items()):
            print(f"{'mapped: ' + name:<34}{'':>13}{nbytes / 1e6:>13.2f}")
        print(f"{'total: est / (traced + snapshot)':<34}{est['total_bytes'] / 1e6:>13.2f}"
              f"{both / 1e6:>13.2f}{ratios['total_vs_convmem_traced_plus_mapped']:>12.3f}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_measure"]:
        print(json.dumps(measure(argv[1], Path(argv[2]), Path(argv[3]))))
        return 0
    p = argparse.ArgumentParser(description="memory_estimate against tracemalloc")
    p.add_argument("--sizes", default="10000,100000")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workdir", default=str(corpus.DATA_DIR / "stores"))
    p.add_argument("--results", default=str(RESULTS_DIR / "memory_accuracy.json"))
    args = p.parse_args(argv)
    results: dict[str, Any] = {"machine": machine_info(), "sizes": {}}
    for size in (int(s) for s in args.sizes.split(",") if s):
        corpus_file = corpus.ensure_corpus(size, args.seed)
        store_dir = Path(args.workdir) / f"memacc-{size}-s{args.seed}"
        per: dict[str, Any] = {}
        for phase in ("import", "reopen"):
            per[phase] = run_phase(phase, corpus_file, store_dir)
            print_result(size, per[phase])
        results["sizes"][str(size)] = per
        shutil.rmtree(store_dir, ignore_errors=True)
    out = Path(args.results)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
