"""Search through the store with analyzer v2 (docs/SCORING.md "Analyzer"): words holding digits
are found exactly, identifiers whole and by parts, English words by their stems with the exact
form first; a store written by the previous tokenizer is re-indexed once at open."""
from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from convmem import MemoryStore
from convmem._core import tokenizer
from convmem.catalog import catalog as catalog_module
from convmem.catalog import docs as docs_module
from convmem.store import recovery
from convmem.store.logfile import LOG_NAME
from convmem.store.snapshot import SNAPSHOT_NAME, read_snapshot

NOISE = ("the build failed again after the deploy so I restarted the server and checked the logs "
         "version 2 of the config uses port 8080 and python with 3 workers at 12 30 today").split()


def write(store: MemoryStore, content: str, session: str = "s") -> str:
    return store.write_message(session_id=session, role="user", content=content)["message"]["message_id"]


def search_ids(store: MemoryStore, query: str, limit: int = 100) -> list[str]:
    return [r["message_id"] for r in store.search_messages(query=query, limit=limit)["results"]]


def _digit_word(rng: random.Random) -> str:
    kind = rng.randrange(5)
    hexd = "0123456789abcdef"
    if kind == 0:   # a short hash
        return "".join(rng.choice(hexd) for _ in range(rng.randint(7, 12)))
    if kind == 1:   # 0x literal
        return "0x" + "".join(rng.choice(hexd) for _ in range(5))
    if kind == 2:   # an error code
        return rng.choice(("E", "ERR", "W")) + str(rng.randint(100, 99999))
    if kind == 3:   # a UUID
        return "-".join("".join(rng.choice(hexd) for _ in range(n)) for n in (8, 4, 4, 4, 12))
    return rng.choice(("python", "node", "gpt", "x", "w")) + str(rng.randint(3, 999))


def test_words_holding_digits_return_exactly_the_messages_holding_them(store: MemoryStore) -> None:
    rng = random.Random(11)
    words = {_digit_word(rng) for _ in range(40)}
    words = {w for w in words if any(c.isalpha() for c in w) and any(c.isdigit() for c in w)}
    holders: dict[str, set[str]] = {w: set() for w in words}
    for i in range(400):
        text = " ".join(rng.choice(NOISE) for _ in range(rng.randint(5, 15)))
        chosen = [w for w in words if rng.random() < 0.02]
        for w in chosen:
            text += f" {rng.choice(('', 'see ', 'id='))}{w.upper() if rng.random() < 0.3 else w},"
        mid = write(store, text, session=f"s{i % 7}")
        for w in chosen:
            holders[w].add(mid)
    assert sum(1 for w in words if holders[w]) >= 20
    for w, ids in holders.items():
        assert set(search_ids(store, w)) == ids, w


def test_a_digit_word_does_not_match_its_letter_or_digit_runs(store: MemoryStore) -> None:
    hit = write(store, "the failing commit is w65bcd49z")
    for text in ("w 65 bcd 49 z", "bcd and 49", "python 3"):
        write(store, text)
    assert search_ids(store, "w65bcd49z") == [hit]
    assert search_ids(store, "python3") == []


def test_identifiers_are_found_whole_and_by_each_part(store: MemoryStore) -> None:
    exact = write(store, "raised ERR_UKRAINIAN_2412 in tend_skill_sole after v2.3.1 changed "
                         "src/config.ts")
    for part in ("err", "ukrainian", "2412", "tend", "skill", "sole", "v2", "config", "ts", "src"):
        assert exact in search_ids(store, part), part
    for whole in ("ERR_UKRAINIAN_2412", "tend_skill_sole", "v2.3.1", "src/config.ts"):
        assert search_ids(store, whole)[0] == exact, whole


def test_the_exact_identifier_ranks_above_messages_sharing_only_parts(store: MemoryStore) -> None:
    # Messages of about the same length that hold every part, separately or joined otherwise.
    partial = [write(store, t) for t in (
        "we should tend the skill of the sole owner of the build", "skill_sole tend is a new name",
        "tend_skill was renamed last week by the team", "the sole reason the skill broke tend",
        "the tend skill sole meeting moved to monday")]
    exact = write(store, "the crash came from tend_skill_sole after the last deploy")
    ranked = search_ids(store, "tend_skill_sole")
    assert ranked[0] == exact
    assert set(ranked[1:]) == set(partial)
    exact_v = write(store, "upgraded to v2.3.1 yesterday after the release notes")
    partial_v = [write(store, t) for t in ("v2 has 3 fixes and 1 known bug in the notes",
                                           "3.1 and v2 were both released yesterday",
                                           "upgraded to v2.3 yesterday after the release",
                                           "upgraded to v2.3.10 today after the release")]
    ranked = search_ids(store, "v2.3.1")
    assert ranked[0] == exact_v
    assert set(partial_v) <= set(ranked)


def test_english_words_match_their_stems_exact_form_first(store: MemoryStore) -> None:
    ids = {w: write(store, f"we talked about {w} the service today")
           for w in ("deploy", "deployed", "deployment", "deploying", "deploys")}
    other = write(store, "we talked about the weather today")
    ranked = search_ids(store, "deploying")
    assert ranked[0] == ids["deploying"]
    assert set(ranked) == set(ids.values())
    assert other not in ranked
    for w in ("deployed", "deployment", "deploys"):
        assert search_ids(store, w)[0] == ids[w], w
    # A query word that is its own stem finds every form too.
    assert set(search_ids(store, "deploy")) == set(ids.values())


def test_possessives_and_contractions_do_not_match_everything(store: MemoryStore) -> None:
    caroline = write(store, "Caroline's notes were moved")
    dont = write(store, "I don't know, it's late")
    plain = [write(store, t) for t in ("s t", "a list of its parts", "notes")]
    assert search_ids(store, "caroline") == [caroline]
    assert search_ids(store, "Caroline's") == [caroline]
    assert search_ids(store, "don't") == [dont]
    assert search_ids(store, "dont") == [dont]
    assert search_ids(store, "s") == [plain[0]]
    assert search_ids(store, "t") == [plain[0]]


def _old_tokenizer() -> SimpleNamespace:
    """Version 1's rules for the test: letter runs and digit runs are separate tokens."""
    import re
    split = re.compile(r"[^\W\d_]+|\d+")

    def token_keys(text: str) -> np.ndarray:
        return np.array([tokenizer.key_of_token(t) for t in split.findall(tokenizer.normalize(text))],
                        dtype=np.uint64)
    return SimpleNamespace(TOKENIZER_VERSION=1, UNICODE_VERSION=tokenizer.UNICODE_VERSION,
                           token_keys=token_keys)


def test_a_store_of_the_previous_tokenizer_is_reindexed_once_at_open(
        store_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    with monkeypatch.context() as m:
        old = _old_tokenizer()
        m.setattr(catalog_module, "tokenizer", old)
        m.setattr(docs_module, "tokenizer", old)
        s = MemoryStore.open(store_dir)
        hit = write(s, "python3 crashed in deploying tend_skill_sole")
        for i in range(30):
            write(s, f"python {i} and 3 more")
        s.close()
    meta, _ = read_snapshot(store_dir / SNAPSHOT_NAME)
    assert meta["tokenizer_version"] == 1
    log_file = store_dir / LOG_NAME
    log_bytes = log_file.read_bytes()
    monkeypatch.setattr(recovery, "REINDEX_PROGRESS_BYTES", 1)
    caplog.clear()
    s = MemoryStore.open(store_dir)
    try:
        err = caplog.text
        assert "indexing the log" in err and "done, 31 records" in err
        assert search_ids(s, "python3") == [hit]
        assert search_ids(s, "deploy") == [hit]
        assert search_ids(s, "tend_skill_sole") == [hit]
    finally:
        s.close()
    assert log_file.read_bytes() == log_bytes
    meta, _ = read_snapshot(store_dir / SNAPSHOT_NAME)
    assert meta["tokenizer_version"] == tokenizer.TOKENIZER_VERSION == 2
    # Once saved, the next open adopts the snapshot: nothing is indexed again.
    caplog.clear()
    s = MemoryStore.open(store_dir)
    try:
        assert "indexing the log" not in caplog.text
        assert search_ids(s, "python3") == [hit]
    finally:
        s.close()
