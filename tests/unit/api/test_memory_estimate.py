"""memory_estimate against tracemalloc: a store built in a fresh process, at several sizes.

The estimate must be within 10% of the bytes tracemalloc still sees allocated after the build
(the store's structures are all that the build leaves behind; message bodies stay in the log).
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent("""
    import gc, json, random, sys, tracemalloc
    from convmem import MemoryStore
    n, path = int(sys.argv[1]), sys.argv[2]
    rng = random.Random(n)
    words = ["database", "decision", "meeting", "python", "deploy", "review", "latency", "index",
             "東京", "会議", "参加", "設定", "データベース", "検索", "予定", "結果"]
    def item(i):
        text = " ".join(rng.choice(words) + str(rng.randrange(50)) for _ in range(rng.randint(5, 80)))
        meta = {"tags": rng.sample(["p", "q", "r", "s"], rng.randint(0, 2)),
                "importance": rng.randrange(101)}
        if i % 7 == 0:
            meta["summary"] = "summary " + rng.choice(words)
        return {"session_id": f"s{i // 40}", "role": "user", "content": text, "metadata": meta}
    items = [item(i) for i in range(n)]
    gc.collect()
    tracemalloc.start()
    store = MemoryStore.open(path)
    store.import_messages(items, batch_size=500)
    store.search_messages(query="database 会議")  # search scratch is part of the estimate
    del items
    gc.collect()
    traced, _ = tracemalloc.get_traced_memory()
    est = store.get_system_health()["memory_estimate"]
    print(json.dumps({"traced": traced, "estimate": est}))
""")


@pytest.mark.parametrize("n", [2000, 8000])
def test_memory_estimate_within_ten_percent_of_traced(tmp_path, n):
    r = subprocess.run([sys.executable, "-c", CHILD, str(n), str(tmp_path / "store")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    est, traced = out["estimate"], out["traced"]
    assert est["total_bytes"] == sum(v for k, v in est.items() if k != "total_bytes")
    ratio = est["total_bytes"] / traced
    assert 0.9 <= ratio <= 1.1, (ratio, est, traced)
