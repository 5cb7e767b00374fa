"""How close is get_system_health()["memory_estimate"] to what tracemalloc sees?

For each corpus size, a fresh subprocess starts tracemalloc after its imports, then either imports
the corpus into a new store ("import") or opens that store again from its snapshot and log
("reopen"). It collects garbage, takes a snapshot and compares, per category and in total,
memory_estimate against the bytes tracemalloc traced, as the ratio estimate / traced.

Attributing traced bytes to the estimate's categories: each allocation's traceback (up to 24
frames) is searched for convmem frames:
- a frame in convmem/catalog/sessions.py -> history_index_bytes,
- a frame in convmem/catalog/relations.py -> relation_index_bytes,
- a frame in convmem/catalog/recall_keys.py -> "index" (the recall keys are metadata_bytes),
- a frame on a line of convmem/catalog/catalog.py that calls the compiled search index
  (`self.index.*`, `index.*`, `core_index.*`, `new_index.*`; compiled code has no frames of its own, so its allocations show up
  on the calling line) -> "index" = metadata_bytes + search_index_bytes (the index reports its
  document columns as metadata and its postings/terms as search index; tracemalloc cannot split
  one call into the two),
- any other frame in convmem/ -> store_entries_bytes (slot/doc columns, the id dict), unless it is
  the log/snapshot I/O code (convmem/store/), which is reported as "store_io" (not estimated),
- no convmem frame at all -> "outside" (interpreter, test harness; reported, not compared); so
  are the caller's input objects made by its parser while bulk import iterated them (the strings
  of them the catalog keeps are counted by the estimate, but not attributable here), and objects
  parsed from the snapshot's meta count as "store_io".
Bodies are not held in memory by the store (body_bytes is 0), so they have no category here.

A reopened store maps its snapshot file (mmap) and uses the arrays in place: those bytes are not
heap allocations and tracemalloc cannot see them. The script therefore also reports the mappings
of files inside the store directory (/proc/self/smaps: mapped size and resident bytes, per file),
and the total ratio estimate / (convmem-traced + mapped snapshot). A mapping of the log holds
message bodies, which the estimate leaves out by design (body_bytes), so it is shown, not added.
Per category, the snapshot's sections are attributed by name (ix.* index, hist_* and kind_counts
history, rel_* relations, the rest store entries) and compared as estimate / (traced + sections).

    python benchmarks/memory_accuracy.py --sizes 10000,100000 [--save | --json PATH]

Checked (check(), also run by gate.py): per category and in total, the import phase's
estimate / traced and the reopen phase's estimate / (traced + mapped sections) within 10%;
exit status 1 when one is not. `--save` writes benchmarks/results/memory_accuracy.json.
"""
from __future__ import annotations

import argparse
import ast
import gc
import json
import shutil
import subprocess
import sys
import tempfile

STEMMER_CACHE_WORDS = 10_000  # PyStemmer's default cache size


def _no_stemmer_cache() -> None:
    """Turn PyStemmer's word cache off in this process, before convmem's tokenizer imports it.
    The cache (a dict of up to 10000 words and stems, ~2 MB, shared by every store in the
    process) is allocated inside the compiled tokenizer, so its bytes carry the frame of the
    line that tokenized a message and would be attributed to the index; it is not the store's
    memory and memory_estimate leaves it out, so the measurement leaves it out too (reported
    apart: stemmer_cache_bytes_excluded). The compiled tokenizer makes its Stemmer without a
    cache anyway (it has its own stem table); the pure-Python twin keeps PyStemmer's."""
    import Stemmer

    original = Stemmer.Stemmer
    Stemmer.Stemmer = lambda algorithm, maxCacheSize=0: original(algorithm, 0)  # type: ignore[misc]


if __name__ == "__main__" and sys.argv[1:2] == ["_measure"]:
    _no_stemmer_cache()  # before anything imports convmem
import time
import tracemalloc
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import _paths  # noqa: E402,F401  (corpus.py and convmem on the path)

import corpus  # noqa: E402
from _results import add_output_args, machine_info, output_path, parse_sizes, write_json  # noqa: E402

API_FILE = ROOT / "convmem" / "catalog" / "catalog.py"
VALIDATION_FILE = ROOT / "convmem" / "validation.py"
INDEX_CALL_PREFIXES = ("self.index.", "index.", "core_index.", "new_index.", "cat.index.",
                       "self._index.")  # (the last: the import worker, catalog._IndexingWorker)
CATEGORIES = ("store_entries_bytes", "history_index_bytes", "relation_index_bytes", "index")


def index_call_lines(path: Path = API_FILE) -> set[int]:
    """Line numbers of catalog.py that lie inside a call into the compiled search index. None
    found, or no `add` among them, means the catalog changed how it feeds the index: the
    attribution would silently put the index's bytes elsewhere, so that is an error."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    lines: set[int] = set()
    methods: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = ast.unparse(node.func)
            if func.startswith(INDEX_CALL_PREFIXES):
                lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
                methods.add(func.rsplit(".", 1)[-1])
        # Token keys computed ahead of the call that hands them to the index (the import batch
        # keeps them for the recall keys too): the index holds those arrays.
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and ast.unparse(node.value.func) == "token_keys"):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    if "add" not in methods:
        raise RuntimeError(f"memory_accuracy: no call of the search index's add() found in {path} "
                           f"(prefixes {INDEX_CALL_PREFIXES}): update INDEX_CALL_PREFIXES")
    return lines


def relation_parse_lines(path: Path = VALIDATION_FILE) -> set[int]:
    """Lines of validation.py's `key == "relations"` branch: the edges it parses (tuples and
    target ids) are kept by the relation index, so their bytes are the relations' although they
    were allocated in validation. Missing branch: an error, for the same reason as above."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test).replace("'", '"') == 'key == "relations"':
            return set(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    raise RuntimeError(f"memory_accuracy: no `if key == \"relations\":` branch in {path}")


def classify(frames: list[tuple[str, int]], index_lines: set[int],
             relation_lines: set[int] = frozenset()) -> str:  # type: ignore[assignment]
    """The estimate category of one allocation, from its traceback."""
    convmem_frames = [(f.replace("\\", "/"), n) for f, n in frames if "/convmem/" in f.replace("\\", "/")]
    if not convmem_frames:
        return "outside"
    innermost = convmem_frames[-1][0]  # (tracemalloc lists frames oldest first)
    if innermost.endswith("convmem/api/bulk.py") and "/convmem/" not in frames[-1][0].replace("\\", "/"):
        # The caller's own input objects, made by its parser while bulk import iterated them;
        # the strings the catalog keeps of them (session names, tags) are the estimate's, but
        # which structure keeps which cannot be told from here: not compared.
        return "outside"
    if innermost.endswith("convmem/store/snapshot.py"):
        # Parsed from the snapshot's meta (session names, tag sets the catalog keeps): the
        # parser's allocation, kept by structures tracemalloc cannot tell apart: store_io.
        return "store_io"
    for f, n in convmem_frames:
        if f.endswith("convmem/catalog/sessions.py"):
            return "history_index_bytes"
        if f.endswith("convmem/catalog/relations.py"):
            return "relation_index_bytes"
        if f.endswith("convmem/validation.py") and n in relation_lines:
            return "relation_index_bytes"
        if f.endswith("convmem/catalog/recall_keys.py"):
            return "index"  # the recall keys: the estimate counts them in metadata_bytes
    for f, n in convmem_frames:
        if f.endswith("convmem/catalog/catalog.py") and n in index_lines:
            return "index"
    if any("/convmem/store/" in f for f, _ in convmem_frames[:1]):
        return "store_io"
    return "store_entries_bytes"


def store_mappings(store_dir: Path) -> dict[str, Any]:
    """Mapped size and resident bytes (/proc/self/smaps) of files under store_dir, and per file.

    A file's mapped size is the bytes of it that some mapping covers, each counted once: a
    snapshot is mapped whole, read-only, and its growable sections again, each privately with
    room over the bytes after it (store/snapshot.py), so summing the mappings would count those
    bytes two or three times. Resident bytes are summed over the mappings as smaps gives them."""
    root = str(store_dir.resolve())
    ranges: dict[str, list[tuple[int, int]]] = {}
    rss_kb = 0
    current = ""
    offset = 0
    try:
        with open("/proc/self/smaps", encoding="utf-8", errors="replace") as f:
            for line in f:
                head = line.split(maxsplit=5)
                if head and "-" in head[0] and not head[0].endswith(":"):
                    path = head[5].strip() if len(head) == 6 else ""
                    current = Path(path).name if path.startswith(root) else ""
                    offset = int(head[2], 16) if current else 0
                elif current and head[0] == "Size:":
                    ranges.setdefault(current, []).append((offset, offset + int(head[1]) * 1024))
                elif current and head[0] == "Rss:":
                    rss_kb += int(head[1])
    except OSError:
        return {"mapped_bytes": -1, "mapped_resident_bytes": -1, "mapped_files": {}}
    per_file = {name: covered_bytes(spans) for name, spans in ranges.items()}
    return {"mapped_bytes": sum(per_file.values()), "mapped_resident_bytes": rss_kb * 1024,
            "mapped_files": per_file}


def covered_bytes(spans: list[tuple[int, int]]) -> int:
    """The length of the union of [start, end) spans."""
    total, reach = 0, -1
    for start, end in sorted(spans):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total


def section_category(name: str) -> str:
    """The estimate category of a snapshot section (docs/FORMAT.md "Snapshot file")."""
    if name.startswith("ix."):
        return "index"
    if name.startswith("hist_") or name == "kind_counts":
        return "history_index_bytes"
    if name.startswith("rel_"):
        return "relation_index_bytes"
    if name.startswith("rk."):
        return "index"  # the recall keys (metadata_bytes)
    return "store_entries_bytes"  # slot_*, doc_*, slot_ulid, id_table, trash_*


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
    relation_lines = relation_parse_lines()
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
        traced[classify(frames, index_lines, relation_lines)] += trace.size
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


TOLERANCE = 0.10


def ratios_checked(r: dict[str, Any]) -> dict[str, float | None]:
    """The ratios a phase is judged by: traced alone after an import (nothing is mapped),
    traced plus the snapshot's sections after a reopen (its arrays are used in place)."""
    if r["phase"] == "import":
        out = {c: r["ratio_estimate_over_traced"][c] for c in CATEGORIES}
        out["total"] = r["ratio_estimate_over_traced"]["total_vs_convmem_attributed"]
    else:
        out = dict(r["ratio_estimate_over_traced_plus_sections"])
        out["total"] = r["ratio_estimate_over_traced"].get("total_vs_convmem_traced_plus_mapped")
    return out


def check(sizes: dict[str, dict[str, Any]], tolerance: float = TOLERANCE) -> list[str]:
    """Every category's ratio and the total within 1 +- tolerance; a category the estimate
    reports but nothing was attributed to (or the reverse) fails too: that is the attribution
    drifting, the failure this check exists for."""
    failures = []
    for size, per in sizes.items():
        for phase, r in per.items():
            for cat, ratio in ratios_checked(r).items():
                where = f"memory {size} {phase} {cat}"
                if ratio is None:
                    est = r["memory_estimate"]
                    estimated = (est["metadata_bytes"] + est["search_index_bytes"] if cat == "index"
                                 else est.get(cat, 0))
                    if estimated:
                        failures.append(f"{where}: estimated {estimated} B but nothing attributed")
                elif abs(ratio - 1) > tolerance:
                    failures.append(f"{where}: estimate / measured = {ratio:.3f}, "
                                    f"outside 1 +- {tolerance:.2f}")
    return failures


def run_sizes(sizes: list[int], seed: int, workdir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for size in sizes:
        corpus_file = corpus.ensure_corpus(size, seed)
        # A directory of its own: two runs at once never share (or wipe) a store.
        workdir.mkdir(parents=True, exist_ok=True)
        store_dir = Path(tempfile.mkdtemp(prefix=f"memacc-{size}-s{seed}-", dir=workdir)) / "store"
        per: dict[str, Any] = {}
        try:
            for phase in ("import", "reopen"):
                per[phase] = run_phase(phase, corpus_file, store_dir)
                print_result(size, per[phase])
        finally:
            shutil.rmtree(store_dir.parent, ignore_errors=True)
        out[str(size)] = per
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_measure"]:
        print(json.dumps(measure(argv[1], Path(argv[2]), Path(argv[3]))))
        return 0
    p = argparse.ArgumentParser(description="memory_estimate against tracemalloc")
    p.add_argument("--sizes", default="10000,100000")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workdir", default=str(corpus.DATA_DIR / "stores"))
    add_output_args(p, "memory_accuracy.json")
    args = p.parse_args(argv)
    sizes = parse_sizes(args.sizes)
    out = output_path(args, "memory_accuracy.json")
    results: dict[str, Any] = {"machine": machine_info(), "tolerance": TOLERANCE,
                               "sizes": run_sizes(sizes, args.seed, Path(args.workdir))}
    failures = check(results["sizes"])
    results["failures"] = failures
    write_json(out, results)
    for f in failures:
        print(f"FAIL {f}", file=sys.stderr)
    print(f"memory accuracy: {'FAIL' if failures else 'ok'} ({len(failures)} outside 1 +- {TOLERANCE})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
