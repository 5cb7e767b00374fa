"""Tokenizer throughput (MB/s of UTF-8 input) on ~1 MB of seeded chat-like text.

Run: pytest benchmarks/bench_tokenizer.py --benchmark-only -q
Target: >= 50 MB/s for token_keys on the mixed English/Japanese corpus (one core).
"""
from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from convmem._core import tokenizer

TARGET_BYTES = 1_000_000
pytestmark = pytest.mark.benchmark(group="tokenizer")

EN_WORDS = (
    "the a to and of is in it that you for on with this be are we can not have but just "
    "server database deploy error config python test build release memory search index "
    "user message session agent tool query result token cache latency update fix bug "
    "please check again thanks looks good yesterday tomorrow meeting notes version"
).split()
EN_EXTRAS = ("v2", "3.12", "2024-05-01", "HTTP/2", "JSON", "API", "OK!", "e.g.", "(see above)")
JA_PHRASES = (
    "データベース", "設定", "東京", "参加", "会議", "明日", "確認", "お願いします", "ありがとうございます",
    "エラーが出ました", "サーバーを再起動", "検索", "メモリ", "テスト", "修正しました", "今日は",
    "について", "ですが", "ません", "でした", "と思います", "ﾃﾞｰﾀ", "ログ", "問題", "対応", "予定",
    "プロジェクト", "資料", "共有", "バージョン", "リリース", "本番環境", "開発",
)
JA_PUNCT = ("、", "。", "！", "？", "「", "」", "（", "）", " ")


def _english_message(rng: random.Random) -> str:
    words = [rng.choice(EN_WORDS) if rng.random() > 0.1 else rng.choice(EN_EXTRAS)
             for _ in range(rng.randint(4, 30))]
    words[0] = words[0].capitalize()
    return " ".join(words) + rng.choice((".", "?", "!", ""))


def _japanese_message(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(3, 14)):
        parts.append(rng.choice(JA_PHRASES))
        if rng.random() < 0.3:
            parts.append(rng.choice(JA_PUNCT))
        if rng.random() < 0.08:  # Japanese chat mixes in English terms
            parts.append(rng.choice(EN_WORDS).upper() if rng.random() < 0.3 else rng.choice(EN_WORDS))
    return "".join(parts) + "。"


def chat_corpus(japanese_share: float, seed: int = 20240501) -> str:
    """Deterministic chat-like text of about TARGET_BYTES UTF-8 bytes. `japanese_share` is the
    probability that a message is Japanese; 0.77 gives about half the characters Japanese
    (Japanese messages are shorter in characters than English ones)."""
    rng = random.Random(seed)
    lines: list[str] = []
    size = 0
    while size < TARGET_BYTES:
        if rng.random() < japanese_share:
            line = _japanese_message(rng)
        else:
            line = _english_message(rng)
        lines.append(line)
        size += len(line.encode()) + 1
    return "\n".join(lines)


CORPORA = {
    "mixed": chat_corpus(0.77),
    "english": chat_corpus(0.0),
    "japanese": chat_corpus(1.0),
}


def japanese_share(text: str) -> float:
    """Share of characters that are not ASCII (here: kana, kanji, Japanese punctuation)."""
    return sum(not c.isascii() for c in text) / max(1, len(text))


def _report(benchmark: pytest.FixtureRequest, name: str, text: str, capsys: pytest.CaptureFixture[str]) -> None:
    nbytes = len(text.encode())
    if benchmark.stats is None:  # --benchmark-disable (CI's smoke run): nothing was timed
        return
    mb_s = nbytes / benchmark.stats.stats.median / 1e6
    share = japanese_share(text)
    benchmark.extra_info.update(mb_per_s=round(mb_s, 1), bytes=nbytes, japanese_share=round(share, 3))
    with capsys.disabled():
        print(f"\n{name}: {nbytes} bytes, {share:.0%} Japanese chars, {mb_s:.1f} MB/s (median)")


def _ids(suffix: str) -> list[str]:
    return [f"compiled-{c}-{suffix}" for c in CORPORA]


@pytest.fixture(autouse=True)
def _size(benchmark):
    benchmark.extra_info["size"] = f"~{TARGET_BYTES // 1_000_000} MB of UTF-8 chat text"


@pytest.mark.parametrize("corpus", list(CORPORA), ids=_ids("1MB string"))
def test_token_keys_whole_corpus(benchmark, capsys, corpus: str) -> None:
    text = CORPORA[corpus]
    keys = benchmark(tokenizer.token_keys, text)
    assert keys.size > 0
    _report(benchmark, f"token_keys[{corpus}] one 1 MB string", text, capsys)


@pytest.mark.parametrize("corpus", list(CORPORA), ids=_ids("1MB per message"))
def test_token_keys_per_message(benchmark, capsys, corpus: str) -> None:
    # The realistic shape: one call per chat message, so per-call overhead counts.
    messages = CORPORA[corpus].split("\n")
    fn: Callable[[str], object] = tokenizer.token_keys

    def run() -> int:
        return sum(len(fn(m)) for m in messages)

    total = benchmark(run)
    assert total > 0
    _report(benchmark, f"token_keys[{corpus}] per message ({len(messages)} calls)", CORPORA[corpus], capsys)


@pytest.mark.parametrize("size", ["compiled-mixed-1MB"])
def test_normalize(benchmark, capsys, size) -> None:
    text = CORPORA["mixed"]
    benchmark(tokenizer.normalize, text)
    _report(benchmark, "normalize[mixed]", text, capsys)
