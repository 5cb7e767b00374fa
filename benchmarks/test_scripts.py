"""Every benchmark script runs at a tiny size, leaves `git status` as it found it and rejects
bad input before any work (CI runs this with the suites: `pytest benchmarks`).

Each script gets its own data directory (CONVMEM_BENCH_DATA), so nothing lands in the checkout;
none is given --save, so no committed result may change.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEBIAN_REFERENCE = Path("/usr/share/debian-reference")
STORE_SIZE = 300


def git_status() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=all"],
                          capture_output=True, text=True, check=True).stdout


def run(script: str, *args: str, data: Path, ok: bool = True, timeout: float = 300,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ, CONVMEM_BENCH_DATA=str(data), **(env or {}))
    done = subprocess.run([sys.executable, str(HERE / script), *args], capture_output=True,
                          text=True, env=full_env, timeout=timeout, cwd=str(data))
    if ok:
        assert done.returncode == 0, f"{script} {args}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(autouse=True)
def _clean_checkout() -> Iterator[None]:
    before = git_status()
    yield
    assert git_status() == before, "a benchmark script changed the checkout"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A convmem store of STORE_SIZE messages, kept by compare_fts5.py --keep-stores."""
    data = tmp_path_factory.mktemp("bench-data")
    engines = "convmem,fts5" + (",tantivy" if importlib.util.find_spec("tantivy") else "")
    out = run("compare_fts5.py", "--sizes", str(STORE_SIZE), "--queries", "20", "--engines", engines,
              "--keep-stores", "--workdir", str(data / "stores"), data=data)
    assert "query" in out.stdout.lower()
    path = data / "stores" / f"{STORE_SIZE}-s1" / "convmem"
    assert (path / "messages.log").is_file()
    return path


def test_corpus(tmp_path: Path) -> None:
    run("corpus.py", "--messages", "200", "--out", str(tmp_path / "c.jsonl"), data=tmp_path)
    run("corpus.py", "queries", "--count", "10", "--messages", "200", "--out", str(tmp_path / "q.jsonl"),
        data=tmp_path)
    assert len((tmp_path / "c.jsonl").read_text().splitlines()) == 200
    assert len((tmp_path / "q.jsonl").read_text().splitlines()) == 10


def test_compare_fts5_writes_only_where_asked(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    run("compare_fts5.py", "--sizes", "200", "--queries", "10", "--json", str(out),
        "--workdir", str(tmp_path / "w"), "--cold", "--rebuild", data=tmp_path)
    import json
    r = json.loads(out.read_text())["sizes"]["200"]
    assert r["machine"]["commit"] and r["machine"]["core"] == "compiled"
    assert r["machine"]["build"] in ("release", "debug") and r["size"] == 200
    # The cold opens and the rebuild come after the queries (they evict the store's cache).
    cm = r["engines"]["convmem"]
    assert cm["query_ms"]["p50"] > 0 and cm["open_first_query_cold_s"] > 0
    assert cm["rebuild_index_s"] > 0 and r["engines"]["fts5"]["open_first_query_cold_s"] > 0


def test_compare_fts5_rejects_a_missing_engine_at_once(tmp_path: Path) -> None:
    done = run("compare_fts5.py", "--sizes", "200", "--engines", "convmem,lucene", data=tmp_path,
               ok=False, timeout=60)
    assert done.returncode != 0 and "lucene" in done.stderr
    assert not (tmp_path / "stores").exists() and not list(tmp_path.glob("corpus-*"))


def test_memory_accuracy(tmp_path: Path) -> None:
    done = run("memory_accuracy.py", "--sizes", "1000", "--json", str(tmp_path / "m.json"),
               data=tmp_path, ok=False)
    assert "memory accuracy:" in done.stdout, done.stderr[-2000:]
    assert (tmp_path / "m.json").is_file()


def test_memory_accuracy_counts_each_mapped_byte_of_a_file_once(tmp_path: Path) -> None:
    """A snapshot is mapped whole and its growable sections again, privately with room (the
    gate's reopen ratio read 0.601 when the mappings were summed)."""
    import mmap

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location("memory_accuracy",
                                                      ROOT / "benchmarks" / "memory_accuracy.py")
        ma = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(ma)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    assert ma.covered_bytes([(0, 10), (5, 20), (30, 40), (32, 35), (40, 41)]) == 31
    assert ma.covered_bytes([]) == 0
    page = mmap.ALLOCATIONGRANULARITY
    path = tmp_path / "snapshot.bin"
    path.write_bytes(b"x" * (8 * page))
    with open(path, "rb") as f:
        maps = [mmap.mmap(f.fileno(), 8 * page, access=mmap.ACCESS_READ),
                mmap.mmap(f.fileno(), 3 * page, access=mmap.ACCESS_COPY, offset=2 * page),
                mmap.mmap(f.fileno(), 4 * page, access=mmap.ACCESS_COPY, offset=4 * page)]
    try:
        assert ma.store_mappings(tmp_path)["mapped_files"] == {"snapshot.bin": 8 * page}
    finally:
        for m in maps:
            m.close()


def test_write_floor(tmp_path: Path) -> None:
    done = run("write_floor.py", "--count", "20", "--warmup", "2", "--dir", str(tmp_path / "wf"),
               data=tmp_path)
    assert "fdatasync" in done.stdout


def test_analyzer_ab_runs_the_twins_of_two_copies(tmp_path: Path) -> None:
    """The whole A/B at a tiny size on the pure twins (nothing compiled); with the same analyzer
    on both sides (HEAD's), both copies must index the same keys and so estimate the same bytes."""
    out = tmp_path / "ab.json"
    done = run("analyzer_ab.py", "--messages", "200", "--queries", "10", "--writes", "5",
               "--rounds", "1", "--repeat", "1", "--base-rev", "HEAD", "--json", str(out),
               data=tmp_path, env={"CONVMEM_PURE": "1"})
    assert "v2/v1" in done.stdout
    r = json.loads(out.read_text())
    assert r["v1"]["memory_B_per_message"] == r["v2"]["memory_B_per_message"] > 0
    assert r["v1"]["core_p50_us"] > 0 and r["v2"]["write_p50_us"] > 0
    assert 0 <= r["stemmed_queries"] <= 10


def test_analyzer_ab_takes_the_analyzer_of_the_base_revision(tmp_path: Path) -> None:
    """The v1 copy holds the base revision's analyzer files (with query_keys added where it has
    none), the v2 copy the working tree's."""
    sys.path.insert(0, str(HERE))
    import analyzer_ab
    head = analyzer_ab.git("rev-parse", "HEAD").strip()
    v1 = analyzer_ab.make_copy(tmp_path / "v1", head, compile_core=False)
    v2 = analyzer_ab.make_copy(tmp_path / "v2", None, compile_core=False)
    for rel in analyzer_ab.ANALYZER_FILES:
        assert (v1 / rel).read_text() == analyzer_ab.git("show", f"{head}:{rel}")
        assert (v2 / rel).read_bytes() == (ROOT / rel).read_bytes()
    assert (v2 / "setup.py").is_file() and (v2 / "convmem" / "_core" / "index.pyx").is_file()
    done = run("analyzer_ab.py", "--base-rev", "no-such-revision", data=tmp_path, ok=False)
    assert done.returncode != 0 and "no-such-revision" in done.stderr
    assert not (tmp_path / "analyzer-ab").exists()  # refused before any work


def test_profile_workloads(tmp_path: Path) -> None:
    done = run("profile_workloads.py", "--messages", "300", "--ops", "30", data=tmp_path)
    assert "search-heavy" in done.stdout and "write-heavy" in done.stdout


def test_bench_index_main(tmp_path: Path) -> None:
    done = run("bench_index.py", data=tmp_path, env={"CONVMEM_BENCH_DOCS": "2000"})
    assert "shipped" in done.stdout and "exhaustive" in done.stdout


def test_bench_import_main(tmp_path: Path) -> None:
    done = run("bench_import.py", "--messages", "200", "--per-session", "50", data=tmp_path)
    assert "first import" in done.stdout


def test_import_scale(tmp_path: Path) -> None:
    import json
    done = run("import_scale.py", "--messages", "300", "--rounds", "1", data=tmp_path)
    res = json.loads(done.stdout)
    assert set(res["modes"]) == {"paused", "on"}
    for mode in res["modes"].values():
        assert mode["runs"][0]["messages"] == 300
    assert sum(res["modes"]["on"]["runs"][0]["gc_passes"].values()) > 0
    assert res["ratio"]["of"] == "paused / on" and res["ratio"]["import_s"] > 0
    serial = json.loads(run("import_scale.py", "--messages", "300", "--modes", "serial",
                            data=tmp_path).stdout)
    assert serial["modes"]["serial"]["runs"][0]["messages"] == 300
    cli = json.loads(run("import_scale.py", "--messages", "300", "--modes", "cli,paused",
                         data=tmp_path).stdout)
    assert cli["modes"]["cli"]["runs"][0]["messages"] == 300  # (as the command reported it)
    assert cli["modes"]["cli"]["close_s"] is None and cli["modes"]["cli"]["rss_peak_mb"] > 10
    assert run("import_scale.py", "--modes", "off", data=tmp_path, ok=False).returncode == 2


def test_rebuild_memory(store: Path, tmp_path: Path) -> None:
    import json
    res = json.loads(run("rebuild_memory.py", "--messages", "300", "--rounds", "2",
                         data=tmp_path).stdout)
    assert len(res["runs"]) == 2 and res["messages"] == 300
    for r in res["runs"]:
        assert r["rebuild_s"] > 0 and r["peak_anon_mb"] >= r["open_anon_mb"] > 0
    copied = json.loads(run("rebuild_memory.py", "--store", str(store), data=tmp_path).stdout)
    assert copied["store"] == str(store) and copied["median"]["rebuild_s"] > 0
    assert (store / "messages.log").is_file()  # (a copy was rebuilt, not the store itself)
    assert not list(tmp_path.glob("cm-rebuild-*"))


def test_scorer_choice(store: Path, tmp_path: Path) -> None:
    import json
    res = json.loads(run("scorer_choice.py", "--store", str(store), "--queries", "20",
                         "--rounds", "1", "--rule", "128,0", "--par-min", "off",
                         "--par-min", "5", "--set", "prime_max_postings=0,sparse_block_span=0",
                         data=tmp_path).stdout)
    assert res["messages"] == STORE_SIZE and res["queries"] == 20
    assert set(res["modes_ms"]) == {"shipped", "pruned", "exhaustive", "rule 128,0",
                                    "one thread", "par-min 5", "best of the two forced",
                                    "prime_max_postings=0,sparse_block_span=0"}
    assert all(m["p50"] > 0 for m in res["modes_ms"].values())
    assert sum(b["queries"] for b in res["pruned_over_exhaustive_by_density"]) <= 20
    assert set(res["over_shipped_by_postings"]) == {"one thread", "par-min 5",
                                                    "prime_max_postings=0,sparse_block_span=0"}
    assert all(0 < b["queries"] <= 20 and b["ratio"] > 0
               for bins in res["over_shipped_by_postings"].values() for b in bins)
    bad = run("scorer_choice.py", "--store", str(store), "--rule", "16", data=tmp_path, ok=False)
    assert bad.returncode == 2 and "DENSITY,MIN_POSTINGS" in bad.stderr
    bad = run("scorer_choice.py", "--store", str(store), "--par-min", "-3", data=tmp_path, ok=False)
    assert bad.returncode == 2 and "expected a number of postings or off" in bad.stderr
    bad = run("scorer_choice.py", "--store", str(store), "--set", "window=64", data=tmp_path,
              ok=False)
    assert bad.returncode == 2 and "NAME=VALUE" in bad.stderr
    missing = run("scorer_choice.py", "--store", str(tmp_path / "none"), data=tmp_path, ok=False)
    assert missing.returncode == 2 and "no such store directory" in missing.stderr


def test_filter_cost(store: Path, tmp_path: Path) -> None:
    import json
    res = json.loads(run("filter_cost.py", "--store", str(store), "--queries", "40",
                         "--rounds", "1", data=tmp_path).stdout)
    assert res["messages"] == STORE_SIZE and res["queries"] == 40
    rows = res["rows"]
    assert rows and all(r["filters"] and r["filtered_ms"] > 0 and r["bare_ms"] > 0
                        and r["no_maxima_ms"] > 0 for r in rows)
    assert sum(g["queries"] for g in res["by_filters"].values()) == len(rows)
    assert res["filtered"]["queries"] == len(rows) and 0 <= res["queries_under"] <= 40
    assert 0 <= res["queries_under_no_maxima"] <= 40 and res["set_p50_ms_no_maxima"] > 0
    bad = run("filter_cost.py", "--store", str(store), "--rounds", "0", data=tmp_path, ok=False)
    assert bad.returncode == 2 and "must be positive" in bad.stderr
    missing = run("filter_cost.py", "--store", str(tmp_path / "none"), data=tmp_path, ok=False)
    assert missing.returncode == 2 and "no such store directory" in missing.stderr


def test_mcp_roundtrip(store: Path, tmp_path: Path) -> None:
    done = run("mcp_roundtrip.py", "--data-dir", str(store), "--messages", str(STORE_SIZE),
               "--queries", "5", data=tmp_path)
    assert "search_p50_ms" in done.stdout


def test_mcp_roundtrip_refuses_a_missing_store_or_a_wrong_size(store: Path, tmp_path: Path) -> None:
    missing = run("mcp_roundtrip.py", "--data-dir", str(tmp_path / "none"), "--messages", "100000",
                  data=tmp_path, ok=False)
    assert missing.returncode != 0 and "no such store directory" in missing.stderr
    assert not (tmp_path / "none").exists()
    wrong = run("mcp_roundtrip.py", "--data-dir", str(store), "--messages", "100000", data=tmp_path, ok=False)
    assert wrong.returncode != 0 and f"holds {STORE_SIZE} messages" in wrong.stderr


def test_relay_latency(store: Path, tmp_path: Path) -> None:
    done = run("relay_latency.py", "--data-dir", str(store), "--messages", str(STORE_SIZE),
               "--spawns", "1", "--queries", "5", "--settle", "0", data=tmp_path)
    assert "through a relay" in done.stdout


@pytest.mark.parametrize("cmd", [["open", "--rounds", "1"], ["cjk", "--repeat", "2"],
                                 ["writes", "--count", "5"],
                                 ["writes", "--count", "5", "--background-nice", "0"],
                                 ["rss", "--seconds", "0.5"]])
def test_open_latency(store: Path, tmp_path: Path, cmd: list[str]) -> None:
    done = run("open_latency.py", cmd[0], "--store", str(store), *cmd[1:], data=tmp_path)
    assert '"machine"' in done.stdout
    if "--background-nice" in cmd:
        assert '"background_nice": 0' in done.stdout
    if cmd[0] == "rss":
        res = json.loads(done.stdout.strip().splitlines()[-1])
        assert res["messages"] == STORE_SIZE and res["queries"] >= 2
        assert res["peak_mb"] >= res["after_open"]["VmRSS"] > 0


def test_open_latency_first_write_writes_to_a_copy(store: Path, tmp_path: Path) -> None:
    before = sorted((p.name, p.stat().st_size) for p in store.iterdir())
    done = run("open_latency.py", "first-write", "--store", str(store), "--rounds", "2",
               "--tmp", str(tmp_path), data=tmp_path)
    res = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(res["rounds"]) == 2
    assert all(r["first_write_ms"] > 0 and r["first_write_minor_faults"] >= 0
               for r in res["rounds"])
    assert sorted((p.name, p.stat().st_size) for p in store.iterdir()) == before
    assert not list(tmp_path.glob("cm-first-write-*"))  # (the copy removed)


def test_ab_checkouts(tmp_path: Path) -> None:
    if not list((ROOT / "convmem" / "_core").glob("index*.so")):  # CI installs, never builds in place
        done = run("ab_checkouts.py", "--a", str(ROOT), "--b", str(ROOT), data=tmp_path, ok=False)
        assert done.returncode != 0 and "built in place" in done.stderr
        return
    done = run("ab_checkouts.py", "--a", str(ROOT), "--b", str(ROOT), "--messages", "200",
               "--queries", "10", "--writes", "5", "--rounds", "1", "--workdir", str(tmp_path / "ab"),
               data=tmp_path)
    assert "B/A" in done.stdout


def test_core_ab(store: Path, tmp_path: Path) -> None:
    if not list((ROOT / "convmem" / "_core").glob("index*.so")):  # CI installs, never builds in place
        done = run("core_ab.py", "--store", str(store), "--a", str(ROOT), "--b", str(ROOT),
                   data=tmp_path, ok=False)
        assert done.returncode != 0 and "not built in place" in done.stderr
        return
    res = json.loads(run("core_ab.py", "--store", str(store), "--a", str(ROOT), "--b", str(ROOT),
                         "--queries", "20", "--rounds", "2", "--settle", "0", data=tmp_path).stdout)
    assert len(res["a"]["rounds"]) == len(res["b"]["rounds"]) == 2
    assert 0 < res["a"]["best_of_rounds"]["p50"] <= res["a"]["best_of_rounds"]["p99"]
    assert res["b_over_a_median"]["all"] > 0
    bad = run("core_ab.py", "--store", str(store), "--a", str(ROOT), "--b", str(tmp_path),
              data=tmp_path, ok=False)
    assert bad.returncode == 2 and "not built in place" in bad.stderr
    missing = run("core_ab.py", "--store", str(tmp_path / "none"), "--a", str(ROOT), "--b",
                  str(ROOT), data=tmp_path, ok=False)
    assert missing.returncode == 2 and "no such store" in missing.stderr


def test_ranking_quality(tmp_path: Path) -> None:
    if not DEBIAN_REFERENCE.is_dir():  # the data set is a Debian package: say so, clearly
        done = run("ranking_quality.py", "--lang", "en", data=tmp_path, ok=False)
        assert done.returncode != 0 and "apt-get install debian-reference-en" in done.stderr
        return
    done = run("ranking_quality.py", "--lang", "en", "--engines", "convmem", data=tmp_path)
    assert "mrr" in done.stdout.lower()


def test_ranking_quality_coverage_counts_the_query_keys_the_answer_holds() -> None:
    import ranking_quality
    docs = ["deploying the server today", "東京の天気", "nothing here"]
    shares = ranking_quality.key_shares([("deploy server", 0), ("東京", 1), ("missing words", 2),
                                         ("nothing missing", 2)], docs)
    # deploy (the stem of deploying) and server: all; 東京: all; none; one of two.
    assert shares == [1.0, 1.0, 0.0, 0.5]
    cov = ranking_quality.coverage(shares)
    assert cov == {"mean_key_share": round((1 + 1 + 0 + 0.5) / 4, 3), "all_keys_share": 0.5}


def test_ranking_quality_weights_one_language_by_the_other_key_shares() -> None:
    import ranking_quality as rq
    # ja: full-share queries ranked first, half-share ones at rank 2 and missed.
    ja = rq.by_share([1.0, 1.0, 0.5, 0.0], [1.0, 1.0, 0.6, 0.5])
    assert ja == {1.0: (2, 1.0), 0.5: (2, 0.25)}
    # en: three full-share queries and one half-share: ja at en's shares is (3 * 1 + 0.25) / 4.
    en = rq.by_share([0.5, 0.5, 0.5, 0.0], [1.0, 1.0, 1.0, 0.7])
    assert rq.at_shares_of(ja, en) == round(3.25 / 4, 4)
    # A bucket of en's that ja has no query in: no figure rather than a made-up one.
    assert rq.at_shares_of(ja, rq.by_share([1.0], [0.8])) is None


def test_ranking_quality_translated_set(tmp_path: Path) -> None:
    """`--translated` asks the same known items in both languages, none of them untranslated."""
    if not Path("/usr/share/doc/maint-guide-ja/html").is_dir():
        done = run("ranking_quality.py", "--set", "maint-guide", "--lang", "ja", data=tmp_path,
                   ok=False)
        assert done.returncode != 0 and "apt-get install maint-guide-ja" in done.stderr
        return
    done = run("ranking_quality.py", "--set", "maint-guide", "--translated", "--engines",
               "convmem", data=tmp_path)
    counts = re.findall(r"maint-guide (en|ja): \d+ sections, (\d+) queries", done.stdout)
    assert [lang for lang, _ in counts] == ["en", "ja"] and counts[0][1] == counts[1][1]
    assert int(counts[0][1]) > 0 and "(0 untranslated)" in done.stdout


def test_ranking_levers_model_matches_convmem(tmp_path: Path) -> None:
    """The levers' model with the levers convmem has built in (the quarter-key lead, the CJK
    run weights and seams) ranks as convmem does (maint-guide's Japanese queries include a lone
    CJK character, 再, which the index matches against the bigrams holding it). Runs only where
    maint-guide-ja is installed."""
    if not Path("/usr/share/doc/maint-guide-ja/html").is_dir():
        done = run("ranking_levers.py", "--set", "maint-guide", "--lang", "ja", data=tmp_path,
                   ok=False)
        assert done.returncode != 0 and "apt-get install maint-guide-ja" in done.stderr
        return
    done = run("ranking_levers.py", "--set", "maint-guide", "--lang", "ja", "--levers",
               "lead-cjk+cjk-runs+seam", "--k1s", "", data=tmp_path)
    ours = re.search(r"convmem MRR@10 ([\d.]+)", done.stdout)
    built_in = re.search(r"lead-cjk\+cjk-runs\+seam\s+MRR@10 ([\d.]+)  vs none [+-]", done.stdout)
    plain = re.search(r"none\s+MRR@10 ([\d.]+)", done.stdout)
    assert ours and built_in and plain and ours.group(1) == built_in.group(1), done.stdout
    assert plain.group(1) != ours.group(1)  # (the levers change the ranking of this set)


def test_gate_smoke(tmp_path: Path) -> None:
    """The command runs and reports (20 writes are too few to judge: CI runs the real gate)."""
    done = run("gate.py", "--checks", "write", "--writes", "20", "--json", str(tmp_path / "g.json"),
               data=tmp_path, ok=False)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    assert "gate: " in done.stdout
    report = json.loads((tmp_path / "g.json").read_text())
    # Judged where the directory's fdatasync reaches a disk; reported as not judged, saying
    # why, where it is too cheap to (a CI machine's tmp measured 48 us): one or the other.
    judged = "write_wait_median_over_fdatasync_floor" in report["ratios"]
    not_judged = "write_not_judged" in report["figures"]
    assert judged != not_judged, report
    if judged:
        assert "write_wait_median_over_fdatasync_floor" in done.stdout
    else:
        assert "no disk flush to compare with" in done.stderr
    assert report["figures"]["write_us"]["fdatasync_floor"]["median"] > 0


def test_gate_does_not_judge_writes_on_tmpfs(tmp_path: Path) -> None:
    """On tmpfs fdatasync reaches no disk: the write ratio is reported as not judged, not
    passed or failed against nothing."""
    shm = Path("/dev/shm")
    assert shm.is_dir(), "Linux provides /dev/shm (tmpfs)"
    with tempfile.TemporaryDirectory(dir=shm) as work:
        done = run("gate.py", "--checks", "write", "--writes", "20", "--workdir", work,
                   "--json", str(tmp_path / "g.json"), data=tmp_path, ok=False)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "g.json").read_text())
    assert "write_wait_median_over_fdatasync_floor" not in report["ratios"], report
    assert "no disk flush to compare with" in report["figures"]["write_not_judged"]



def test_compiled_rows_refuse_the_twin(tmp_path: Path) -> None:
    """Under CONVMEM_PURE=1 a [compiled...] row would time the twin: it errors, naming why,
    while the twin's own rows run."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(HERE / "bench_codec.py"), "--benchmark-disable", "-rE"],
                          capture_output=True, text=True, timeout=300, cwd=str(ROOT),
                          env=dict(os.environ, CONVMEM_PURE="1", CONVMEM_BENCH_DATA=str(tmp_path)))
    assert done.returncode != 0
    assert "refusing to time test_encode_message[compiled-1KB msg] with the pure-python core" in done.stdout
    assert "test_encode_message[twin-1KB msg]" not in done.stdout.split("short test summary")[-1]


def test_filtered_search(tmp_path: Path) -> None:
    out = tmp_path / "f.json"
    run("filtered_search.py", "--messages", "300", "--queries", "10", "--rounds", "1",
        "--store", str(tmp_path / "s"), "--results", str(out), data=tmp_path)
    import json
    r = json.loads(out.read_text())
    assert r["messages"] == 300 and r["core"] == "compiled"
    done = run("filtered_search.py", "--messages", "400", "--queries", "10", "--rounds", "1",
               "--store", str(tmp_path / "s"), data=tmp_path, ok=False, timeout=60)
    assert done.returncode != 0 and "300 messages" in done.stderr


def test_recall_latency(store: Path, tmp_path: Path) -> None:
    import shutil
    copy = tmp_path / "store"
    shutil.copytree(store, copy)  # it writes (remember, after-write figures)
    out = tmp_path / "r.json"
    run("recall_latency.py", "--store", str(copy), "--messages", str(STORE_SIZE), "--queries", "10",
        "--repeat", "5", "--writes", "2", "--results", str(out), data=tmp_path)
    import json
    r = json.loads(out.read_text())
    assert r["active_messages"] >= STORE_SIZE and r["recall"]["p50_ms"] > 0
    done = run("recall_latency.py", "--store", str(tmp_path / "none"), "--messages", "300",
               data=tmp_path, ok=False, timeout=60)
    assert done.returncode != 0 and "not a convmem store" in done.stderr
    assert not (tmp_path / "none").exists()


def test_trash(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    run("trash.py", "--messages", "300", "--deleted", "30", "--rounds", "5",
        "--data-dir", str(tmp_path / "d"), "--results", str(out), data=tmp_path)
    assert out.is_file() and not (tmp_path / "d").exists()
