"""Seeded synthetic chat corpus and query set for convmem benchmarks (standard library + numpy).

Corpus (JSON Lines in the importer's shape, one message per line):

    {"session_id": "conv-000042", "role": "user", "content": "...", "metadata": {...},
     "timestamp": 1704067200000, "message_id": "01HK..."}

- Conversations of 20 to 300 messages (log-uniform), written one after the other; the last one is
  cut to make exactly N messages. Roles alternate user/assistant, with an occasional system message.
- About a third of the messages are Japanese: 30 % of conversations are Japanese (90 % of their
  messages), 5 % bilingual, the rest English (3 % Japanese replies). A third of Japanese messages
  carry English technical words inside the sentence (`Pythonの設定を確認します。`).
- Zipf-like vocabulary: ~3k English word forms, a 200k pseudo-word tail and numbers for rare terms;
  Japanese nouns (東京, 参加, 設定, データベース, ...) with particles, sentence endings and chat
  phrases, plus synthetic kanji compounds and katakana words as the rare tail.
- Lengths in UTF-8 bytes are lognormal by role (median a few hundred bytes), with 1 % "pastes" up to
  ~480 KB.
- Metadata: tags from a small vocabulary, memory_kind, memory_tier, importance, occasional summary,
  tool_call_id, relations to earlier messages of the same conversation, source_message_ids on
  summaries. Timestamps increase strictly; ULIDs encode them.

The vocabulary does not depend on the seed, so queries made for one seed find terms in any corpus.
Session ids are `conv-NNNNNN` and depend only on (messages, seed), so `make_queries` can pick real
sessions without reading the corpus.

CLI:
    python benchmarks/corpus.py --messages 100000 --seed 1 --out benchmarks/data/c100k.jsonl
    python benchmarks/corpus.py queries --count 1000 --seed 1 --messages 100000 --out q.jsonl
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _paths  # noqa: E402  (the data directory outside the checkout)

DATA_DIR = _paths.data_dir()  # generated corpora: a cache outside the checkout
BASE_TS_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
VOCAB_SEED = 20240101  # fixed: the vocabulary is the same for every corpus seed
MAX_CONTENT_BYTES = 480_000
MAX_SUMMARY_BYTES = 4096

_FUNCTION_WORDS = """the of and to a in is it you that was for on are with as i his they be at
one have this from or had by not but what some we can out other were all there when up use your
how said an each she which do their time if will way about many then them would like so these her
make see him two has more day could go come did no most people my over know than who may down been
now any new just only very also here must should our me even such why because well where after
back still too does really yes ok okay thanks please sure maybe let me""".split()

_CONTENT_WORDS = """database server query index search memory message session user assistant
system python function error deploy build test release config setting install package module import
export token japanese english latency throughput benchmark cache disk file log snapshot record
schema table column row json api endpoint request response client timeout retry thread process lock
commit branch merge review bug fix issue feature design document meeting decision project deadline
schedule budget customer team manager report summary note plan task priority status update version
upgrade migration backup restore cluster node container docker cloud storage network bandwidth
security password account permission role access admin dashboard metric monitor alert incident
outage recovery performance optimize profile compile compiler cython numpy sqlite postgres redis
kafka queue worker job scheduler script shell terminal command argument option flag parameter
variable value string integer float array list object class method interface type pointer buffer
byte encoding unicode vector embedding model prompt context window agent tool call conversation
history relation importance tier kind tag filter score ranking relevance posting word work part
take get place made live thing look number sound find long write first water call side name line
turn cause move right show form great help tell follow start change play spell read hand large
point answer study learn plant cover food state keep think city tree cross start story open seem
group begin walk paper music mark letter mile river book carry science room friend idea stop
watch color face order problem piece space hour question step interest reach travel table simple
pattern center person money serve appear rule notice voice unit power town drive teach develop
minute decide surface system record check game shape bring paint language travel office email
phone weather weekend dinner lunch coffee trip hotel flight train ticket station airport tokyo
osaka kyoto conference talk slide demo customer contract invoice payment price cost estimate
quote offer goal result data chart graph sheet spreadsheet folder directory path link page site
browser mobile app screen button input output format parse encode decode store load save delete
insert select join group sort limit offset cursor batch stream event handler callback promise async
await future task loop timer clock date month year week morning evening night today tomorrow
yesterday answer reply draft edit comment approve reject confirm cancel remind schedule invite
attend join leave share send receive forward archive label folder inbox calendar reminder deadline
milestone sprint backlog ticket epic story estimate velocity retro standup sync handoff onboarding
training hiring interview candidate offer salary bonus review feedback goal okr metric target
revenue growth churn retention cohort funnel conversion signup login logout session cookie header
payload schema migration rollback hotfix patch vulnerability audit compliance privacy policy
license copyright trademark vendor supplier partner investor board strategy roadmap vision mission
""".split()

_TECH_CASED = """Python API SQLite JSON MCP GitHub Docker Linux CI PR Slack Zoom Excel AWS
Cython numpy BM25 UTF-8 URL HTTP Rust Go TypeScript React""".split()

_JA_NOUNS = """東京 参加 設定 データベース 会議 資料 確認 予定 連絡 質問 回答 問題 解決 方法
情報 検索 結果 時間 今日 明日 昨日 来週 先週 仕事 会社 プロジェクト システム サーバー ファイル
エラー テスト 実装 設計 開発 環境 変更 更新 削除 追加 保存 記憶 会話 履歴 要約 重要 優先 顧客
担当 報告 提案 検討 対応 修正 機能 性能 速度 メモリ インデックス クエリ ユーザー アカウント
パスワード ログ バックアップ 復元 移行 配布 リリース バージョン 日本語 英語 翻訳 文字 単語 文章
説明 理由 目的 手順 準備 完了 開始 終了 期限 予算 費用 見積 契約 請求 支払 出張 旅行 新幹線
飛行機 ホテル 予約 天気 週末 家族 友達 食事 ランチ 会場 発表 講演 研究 論文 実験 分析 統計 学習
モデル 評価 精度 品質 安全 権限 管理 運用 監視 障害 復旧 通知 設定ファイル 接続 通信 応答 遅延
処理 並列 同期 非同期 整合性 一貫性 互換性 依存関係 部署 上司 同僚 新人 研修 面接 採用 目標 成果
課題 改善 効率 自動化 手作業 議事録 共有 画面 ボタン 入力 出力 形式 文字化け 改行 全角 半角 漢字
ひらがな カタカナ 大阪 京都 名古屋 福岡 札幌 横浜 渋谷 新宿 品川 駅 空港 電車 会議室 打ち合わせ
スケジュール タスク チケット レビュー マージ ブランチ コミット デプロイ 本番 開発環境 検証環境""".split()

_JA_PARTICLES = "は が を に で の と も から まで へ や より について として".split()
_JA_PARTICLE_P = np.array([12, 10, 14, 10, 9, 16, 6, 4, 3, 2, 1, 2, 1, 2, 1], dtype=float)

_JA_ENDINGS = """します。 しました。 してください。 です。 ですね。 でした。 ですか？ しましょう。
できます。 できません。 お願いします。 確認します。 確認しました。 わかりました。 大丈夫です。
問題ありません。 思います。 と思います。 かもしれません。 必要です。 してみます。 しておきます。
になります。 がありますか？ はどうですか？ ありがとうございます。 よろしくお願いします。
すみません、 えっと、 なるほど、 たしかに、 了解です。 承知しました。 おはようございます。
お疲れさまです。 参加します。 参加できません。 設定しました。 東京に行きます。""".split()

_KANJI = """日一国会人年大十二本中長出三同時政事自行社見月分議後前民生連五発間対上部東者党地合市業内
相方四定今回新場金員九入選立開手米力学問高代明実円関決子動京全目表戦経通外最言氏現理調体化田当
八六約主題下首意法不来作性的要用制治度務強気小七成期公持野協取都和統以機平総加山思家話世受区領
多県続進正安設保改数記院女初北午指権心界支第産結百派点教報済書府活原先共得解名交資予川向際査勝
面委告軍文反元重近千考判認画海参売利組知案道信策集在件団別物側任引使求所次水半品昨論計死官増係
感特情投示変打男基私各始島直両朝革価式確村提運終挙果西勢減台広容必応演電歳住争談能無再位置企真
流格有疑口過局少放税検藤町常校料沢裁状工建語球営空職証土与急止送援供可役構木割聞身費付施""".replace("\n", "")

_KATAKANA = list("アイウエオカキクケコサシスセソタチツテトナニヌネノハヒフヘホマミムメモヤユヨラリルレロワン"
                 "ガギグゲゴザジズゼゾダデドバビブベボパピプペポ") + ["ー"] * 6

TAGS = """project decision bug todo idea confirmed meeting design release question followup urgent
personal work research database performance security docs api 東京 設定 会議 重要""".split()
KINDS = ["conversation", "episode", "semantic", "procedure", "preference", "summary"]
_KIND_P = np.array([0.82, 0.05, 0.05, 0.025, 0.025, 0.03])
TIERS = ["short", "mid", "long", "discard"]
_TIER_P = np.array([0.65, 0.22, 0.10, 0.03])
RELATION_TYPES = ["depends_on", "derived_from", "supersedes", "related_to"]
_CROCKFORD = np.frombuffer(b"0123456789ABCDEFGHJKMNPQRSTVWXYZ", dtype=np.uint8)


def _zipf_cdf(n: int, s: float) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** s
    cdf = np.cumsum(w)
    return cdf / cdf[-1]


def _inflect(word: str) -> list[str]:
    stem = word[:-1] if word.endswith("e") else word
    plural = word + "es" if word.endswith(("s", "x", "ch", "sh")) else word + "s"
    return [plural, stem + "ing", stem + "ed", word + "er"]


class Vocab:
    """Token tables and their Zipf CDFs (built once per process, independent of the seed)."""

    def __init__(self) -> None:
        rng = np.random.default_rng(VOCAB_SEED)
        base = list(dict.fromkeys(_FUNCTION_WORDS + _CONTENT_WORDS))
        seen = set(base)
        inflected = [f for w in _CONTENT_WORDS for f in _inflect(w) if f not in seen]
        self.english = base + list(dict.fromkeys(inflected))
        self.n_function = len(_FUNCTION_WORDS)
        # Pseudo-words: 2-4 consonant-vowel syllables, unique, in a fixed random order (rare tail).
        cons = list("bcdfghjklmnprstvwz") + ["ch", "sh", "th", "st", "tr", "br", "pl"]
        syll = np.array([c + v for c in cons for v in ["a", "e", "i", "o", "u", "ai", "ou"]])
        pseudo: dict[str, None] = {}
        while len(pseudo) < 200_000:
            k = int(rng.integers(2, 5))
            picks = syll[rng.integers(0, len(syll), size=(50_000, k))]
            for row in picks.tolist():
                pseudo["".join(row)] = None
        for w in self.english:
            pseudo.pop(w, None)
        self.pseudo = list(pseudo)[:200_000]
        self.numbers = [str(i) for i in range(100_000)]
        # One object table for English-side tokens: [english | pseudo | numbers].
        self.en_table = np.array(self.english + self.pseudo + self.numbers, dtype=object)
        self.off_pseudo = len(self.english)
        self.off_numbers = self.off_pseudo + len(self.pseudo)
        self.cdf_english = _zipf_cdf(len(self.english), 1.0)
        self.cdf_pseudo = _zipf_cdf(len(self.pseudo), 0.9)
        # Japanese nouns: real ones first (Zipf head), then synthetic kanji compounds and katakana.
        kanji = np.array(list(_KANJI))
        kata = np.array(_KATAKANA)
        synth: dict[str, None] = {}
        while len(synth) < 50_000:
            for row in kanji[rng.integers(0, len(kanji), size=(20_000, 2))].tolist():
                synth["".join(row)] = None
            lens = rng.integers(3, 7, size=10_000)
            for n, row in zip(lens.tolist(), kata[rng.integers(0, len(kata), size=(10_000, 6))].tolist()):
                word = "".join(row[:n]).lstrip("ー")
                if len(word) >= 2:
                    synth[word] = None
        for w in _JA_NOUNS:
            synth.pop(w, None)
        self.ja_synth = list(synth)[:50_000]
        self.ja_nouns = list(_JA_NOUNS)
        self.ja_table = np.array(self.ja_nouns + self.ja_synth + _TECH_CASED, dtype=object)
        self.off_ja_synth = len(self.ja_nouns)
        self.off_tech = self.off_ja_synth + len(self.ja_synth)
        self.cdf_ja = _zipf_cdf(len(self.ja_nouns), 1.0)
        self.cdf_ja_synth = _zipf_cdf(len(self.ja_synth), 0.8)
        self.particles = np.array(_JA_PARTICLES, dtype=object)
        self.particle_cdf = np.cumsum(_JA_PARTICLE_P) / _JA_PARTICLE_P.sum()
        self.endings = np.array([""] + _JA_ENDINGS, dtype=object)
        self.cdf_endings = _zipf_cdf(len(_JA_ENDINGS), 0.9)
        self.en_punct = np.array(["", ".", ",", "?", ".\n", "!"], dtype=object)
        self.en_punct_cdf = np.cumsum([0.84, 0.07, 0.05, 0.015, 0.02, 0.005])
        # Mean UTF-8 bytes per English token (with its space) and per Japanese slot, to turn byte
        # targets into token counts.
        self.en_token_bytes = 6.3
        self.ja_slot_bytes = 19.0

    # --- token sampling ---------------------------------------------------------------------
    def english_tokens(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """n English-side tokens: 90 % English words, 7 % pseudo-words, 3 % numbers."""
        u = rng.random(n)
        ids = np.searchsorted(self.cdf_english, rng.random(n), side="right")
        pseudo = u >= 0.90
        if pseudo.any():
            k = int(pseudo.sum())
            ids[pseudo] = self.off_pseudo + np.searchsorted(self.cdf_pseudo, rng.random(k), side="right")
        num = u >= 0.97
        if num.any():
            k = int(num.sum())
            vals = np.minimum(np.exp(rng.normal(2.5, 2.2, size=k)), 99_999).astype(np.int64)
            ids[num] = self.off_numbers + vals
        return self.en_table[np.minimum(ids, len(self.en_table) - 1)]

    def english_texts(self, rng: np.random.Generator, counts: list[int]) -> list[str]:
        """One English text per entry of `counts` (tokens each), sampled in one batch."""
        total = sum(counts)
        words = self.english_tokens(rng, total)
        punct = self.en_punct[np.searchsorted(self.en_punct_cdf, rng.random(total) * self.en_punct_cdf[-1])]
        ends = np.cumsum(counts)
        punct[ends - 1] = "."
        tokens = (words + punct).tolist()
        out: list[str] = []
        start = 0
        for stop in ends.tolist():
            out.append(" ".join(tokens[start:stop]))
            start = stop
        return out

    def japanese_texts(self, rng: np.random.Generator, counts: list[int],
                       english_share: list[float]) -> list[str]:
        """One Japanese text per entry of `counts` (noun + particle (+ ending) slots each);
        `english_share[i]` of the nouns of text i are English technical words."""
        n = sum(counts)
        u = rng.random(n)
        ids = np.searchsorted(self.cdf_ja, rng.random(n), side="right")
        rare = u >= 0.92
        if rare.any():
            ids[rare] = self.off_ja_synth + np.searchsorted(
                self.cdf_ja_synth, rng.random(int(rare.sum())), side="right")
        ids = np.minimum(ids, self.off_tech - 1)
        share = np.repeat(np.asarray(english_share, dtype=np.float64), counts)
        eng = rng.random(n) < share
        if eng.any():
            ids[eng] = self.off_tech + rng.integers(0, len(_TECH_CASED), size=int(eng.sum()))
        nouns = self.ja_table[ids]
        parts = self.particles[np.searchsorted(self.particle_cdf, rng.random(n) * self.particle_cdf[-1])]
        ends = np.searchsorted(self.cdf_endings, rng.random(n), side="right") + 1
        ends[rng.random(n) < 0.55] = 0
        stops = np.cumsum(counts)
        ends[stops - 1] = np.maximum(ends[stops - 1], 1)
        slots = (nouns + parts + self.endings[ends]).tolist()
        out: list[str] = []
        start = 0
        for stop in stops.tolist():
            out.append("".join(slots[start:stop]))
            start = stop
        return out


@lru_cache(maxsize=1)
def vocab() -> Vocab:
    return Vocab()


def _rngs(seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    structure, content = np.random.SeedSequence(seed).spawn(2)
    return np.random.default_rng(structure), np.random.default_rng(content)


def conversation_lengths(messages: int, seed: int) -> list[int]:
    """Messages per conversation (20..300, log-uniform), the last one cut so they sum to `messages`."""
    rng, _ = _rngs(seed)
    lengths: list[int] = []
    total = 0
    while total < messages:
        n = int(np.exp(rng.uniform(np.log(20), np.log(301))))
        n = min(n, messages - total)
        lengths.append(n)
        total += n
    return lengths


def session_id(index: int) -> str:
    return f"conv-{index:06d}"


def ulids(ts_ms: np.ndarray, rng: np.random.Generator) -> list[str]:
    """Canonical 26-character ULIDs: 10 Crockford base32 digits of the ms timestamp, 16 random."""
    n = len(ts_ms)
    digits = np.empty((n, 26), dtype=np.int64)
    ts = ts_ms.astype(np.int64)
    for i in range(10):
        digits[:, i] = (ts >> (45 - 5 * i)) & 31
    digits[:, 10:] = rng.integers(0, 32, size=(n, 16))
    chars = _CROCKFORD[digits]
    return [b.decode("ascii") for b in chars.view("S26").ravel().tolist()]


def _fit_utf8(text: str, limit: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore")


def _lengths_bytes(rng: np.random.Generator, roles: np.ndarray) -> np.ndarray:
    """Target UTF-8 length per message: lognormal by role, 1 % pastes of several KB to ~480 KB."""
    n = len(roles)
    median = np.where(roles == 0, 140.0, np.where(roles == 1, 480.0, 220.0))
    sigma = np.where(roles == 0, 1.0, np.where(roles == 1, 1.05, 0.6))
    out = median * np.exp(rng.normal(0.0, 1.0, size=n) * sigma)
    paste = (rng.random(n) < 0.01) & (roles != 2)
    if paste.any():
        out[paste] = np.exp(rng.normal(np.log(6000), 1.4, size=int(paste.sum())))
    return np.clip(out, 2, MAX_CONTENT_BYTES)


def _contents(voc: Vocab, rng: np.random.Generator, is_ja: np.ndarray, mixed: np.ndarray,
              targets: np.ndarray) -> list[str]:
    """Message texts of one conversation, sampled in two batches (English, Japanese)."""
    m = len(targets)
    out = [""] * m
    en = np.flatnonzero(~is_ja)
    ja = np.flatnonzero(is_ja)
    if len(en):
        counts = np.maximum(1, np.rint(targets[en] / voc.en_token_bytes)).astype(int).tolist()
        for i, text in zip(en.tolist(), voc.english_texts(rng, counts)):
            out[i] = text
        # A few English messages end with a short Japanese phrase.
        tail = en[mixed[en] & (rng.random(len(en)) < 0.15)]
        if len(tail):
            counts = rng.integers(1, 4, size=len(tail)).tolist()
            for i, text in zip(tail.tolist(), voc.japanese_texts(rng, counts, [0.0] * len(tail))):
                out[i] += " " + text
    if len(ja):
        counts = np.maximum(1, np.rint(targets[ja] / voc.ja_slot_bytes)).astype(int).tolist()
        share = np.where(mixed[ja], 0.08, 0.0).tolist()
        for i, text in zip(ja.tolist(), voc.japanese_texts(rng, counts, share)):
            out[i] = text
    return out


def _summaries(voc: Vocab, rng: np.random.Generator, is_ja: np.ndarray,
               has_summary: np.ndarray) -> dict[int, str]:
    """Short summaries (median ~18 English tokens) for the flagged messages, in their language."""
    out: dict[int, str] = {}
    idx = np.flatnonzero(has_summary)
    if not len(idx):
        return out
    k = np.maximum(2, np.exp(rng.normal(np.log(18), 0.6, size=len(idx)))).astype(int)
    en = ~is_ja[idx]
    if en.any():
        for i, text in zip(idx[en].tolist(), voc.english_texts(rng, k[en].tolist())):
            out[i] = _fit_utf8(text, MAX_SUMMARY_BYTES)
    if (~en).any():
        counts = np.maximum(1, k[~en] // 3).tolist()
        for i, text in zip(idx[~en].tolist(), voc.japanese_texts(rng, counts, [0.0] * len(counts))):
            out[i] = _fit_utf8(text, MAX_SUMMARY_BYTES)
    return out


def iter_messages(messages: int, seed: int) -> Iterator[dict[str, Any]]:
    """Yield the corpus as import dicts, conversation by conversation."""
    voc = vocab()
    _, rng = _rngs(seed)
    clock = BASE_TS_MS + int(rng.integers(0, 86_400_000))
    tag_cdf = _zipf_cdf(len(TAGS), 0.8)
    for conv, m in enumerate(conversation_lengths(messages, seed)):
        sid = session_id(conv)
        # Language of the conversation: 0 English, 1 Japanese, 2 bilingual.
        lang = int(np.searchsorted([0.65, 0.95, 1.0], rng.random(), side="right"))
        ja_p = (0.03, 0.90, 0.5)[lang]
        # Roles: 0 user, 1 assistant, 2 system; alternate, with an occasional system message.
        roles = np.arange(m) % 2
        if rng.random() < 0.3:
            roles = np.concatenate(([2], roles[: m - 1]))
        roles[(rng.random(m) < 0.02) & (np.arange(m) > 0)] = 2
        is_ja = rng.random(m) < ja_p
        mixed = rng.random(m) < 0.33
        targets = _lengths_bytes(rng, roles)
        gaps = np.where(roles == 1, rng.integers(1_500, 25_000, size=m),
                        np.exp(rng.normal(np.log(30_000), 1.2, size=m)).astype(np.int64))
        clock += int(rng.exponential(600_000)) + 1
        ts = clock + np.cumsum(np.maximum(gaps, 1))
        clock = int(ts[-1])
        ids = ulids(ts, rng)
        kinds = np.searchsorted(np.cumsum(_KIND_P), rng.random(m) * _KIND_P.sum(), side="right")
        tiers = np.searchsorted(np.cumsum(_TIER_P), rng.random(m) * _TIER_P.sum(), side="right")
        importance = np.clip(np.rint(rng.normal(50, 18, size=m)), 0, 100).astype(int)
        importance = np.where((kinds == 2) | (kinds == 4), np.minimum(importance + 15, 100), importance)
        n_tags = np.searchsorted([0.6, 0.85, 0.95, 1.0], rng.random(m), side="right")
        has_summary = (rng.random(m) < 0.03) | (kinds == 5)
        has_rel = (rng.random(m) < 0.05) & (np.arange(m) > 0)
        has_call = (roles == 1) & (rng.random(m) < 0.03)
        roles_s = np.array(["user", "assistant", "system"])[roles].tolist()
        contents = _contents(voc, rng, is_ja, mixed, targets)
        summaries = _summaries(voc, rng, is_ja, has_summary)
        for i in range(m):
            content = contents[i]
            meta: dict[str, Any] = {
                "memory_kind": KINDS[kinds[i]],
                "memory_tier": TIERS[tiers[i]],
                "importance": int(importance[i]),
            }
            if n_tags[i]:
                picks = np.searchsorted(tag_cdf, rng.random(int(n_tags[i])), side="right")
                meta["tags"] = list(dict.fromkeys(TAGS[min(p, len(TAGS) - 1)] for p in picks))
            if has_summary[i]:
                meta["summary"] = summaries[i]
            if has_rel[i]:
                k = int(rng.integers(1, 3))
                targets_i = rng.integers(0, i, size=k)
                meta["relations"] = [
                    {"type": RELATION_TYPES[int(rng.integers(0, 4))], "message_id": ids[int(t)]}
                    for t in dict.fromkeys(targets_i.tolist())
                ]
            if kinds[i] == 5 and i > 0:
                k = int(min(i, rng.integers(2, 11)))
                src = np.sort(rng.choice(i, size=k, replace=False))
                meta["source_message_ids"] = [ids[int(t)] for t in src]
            if has_call[i]:
                meta["tool_call_id"] = f"call_{int(rng.integers(0, 2**48)):012x}"
            yield {
                "session_id": sid,
                "role": roles_s[i],
                "content": content,
                "metadata": meta,
                "timestamp": int(ts[i]),
                "message_id": ids[i],
            }


def generate(path: str | Path, messages: int, seed: int) -> Path:
    """Write the corpus to `path` (JSON Lines, UTF-8), via a temporary file renamed at the end."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
    with open(tmp, "w", encoding="utf-8", buffering=1 << 20) as f:
        buf: list[str] = []
        for msg in iter_messages(messages, seed):
            buf.append(dumps(msg))
            if len(buf) >= 2000:
                buf.append("")
                f.write("\n".join(buf))
                buf.clear()
        if buf:
            buf.append("")
            f.write("\n".join(buf))
    tmp.replace(path)
    return path


def read_corpus(path: str | Path) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def corpus_path(messages: int, seed: int) -> Path:
    return DATA_DIR / f"corpus-{messages}-s{seed}.jsonl"


def ensure_corpus(messages: int, seed: int) -> Path:
    """The cached corpus file under DATA_DIR, generated first if missing."""
    path = corpus_path(messages, seed)
    if not path.exists():
        generate(path, messages, seed)
    return path


def add_run_options(ap: argparse.ArgumentParser, tmp_help: str) -> None:
    """The options of a script that runs on the seeded corpus in rounds, each in a scratch store:
    --messages, --seed, --rounds and --tmp (where the stores go; default the data directory)."""
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--tmp", type=Path, default=None, help=tmp_help)


# --- queries ---------------------------------------------------------------------------------

def make_queries(count: int, seed: int, messages: int) -> list[dict[str, Any]]:
    """`count` search_messages argument dicts: 1-5 terms mixing common, mid and rare English and
    Japanese terms; about a quarter carry filters (kinds/tiers/tags, session_id, min_importance)."""
    voc = vocab()
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x51]))
    n_sessions = len(conversation_lengths(messages, seed))
    common_en = voc.english[: voc.n_function]
    mid_en = voc.english[voc.n_function: voc.n_function + 600]
    rare_en = voc.pseudo[1000:50_000] + voc.english[-1500:]
    common_ja = voc.ja_nouns[:20]
    mid_ja = voc.ja_nouns[20:]
    rare_ja = voc.ja_synth[500:20_000]
    out: list[dict[str, Any]] = []
    for _ in range(count):
        n_terms = int(np.searchsorted([0.25, 0.55, 0.8, 0.93, 1.0], rng.random(), side="right")) + 1
        lang = rng.random()
        terms: list[str] = []
        for _t in range(n_terms):
            ja = lang >= 0.6 if lang < 0.9 else rng.random() < 0.5
            band = rng.random()
            if ja:
                pool = common_ja if band < 0.3 else mid_ja if band < 0.75 else rare_ja
            else:
                pool = common_en if band < 0.3 else mid_en if band < 0.75 else rare_en
            terms.append(pool[int(rng.integers(0, len(pool)))])
        args: dict[str, Any] = {"query": " ".join(dict.fromkeys(terms)), "limit": 20}
        if rng.random() < 0.25:
            filters: dict[str, list[str]] = {}
            if rng.random() < 0.5:
                filters["kinds"] = sorted(set(rng.choice(KINDS, size=int(rng.integers(1, 3))).tolist()))
            if rng.random() < 0.4:
                filters["tiers"] = sorted(set(rng.choice(TIERS[:3], size=int(rng.integers(1, 3))).tolist()))
            if rng.random() < 0.3 or not filters:
                filters["tags"] = [TAGS[int(rng.integers(0, 8))]]
            args["filters_json"] = json.dumps(filters, ensure_ascii=False)
        if rng.random() < 0.05:
            args["session_id"] = session_id(int(rng.integers(0, n_sessions)))
        if rng.random() < 0.10:
            args["min_importance"] = int(rng.integers(55, 81))
        out.append(args)
    return out


def write_queries(path: str | Path, count: int, seed: int, messages: int) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for q in make_queries(count, seed, messages):
            f.write(json.dumps(q, ensure_ascii=False) + "\n")
    return path


def read_queries(path: str | Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["queries"]:
        p = argparse.ArgumentParser(prog="corpus.py queries", description="write a seeded query set")
        p.add_argument("--count", type=int, default=1000)
        p.add_argument("--seed", type=int, default=1)
        p.add_argument("--messages", type=int, required=True, help="corpus size (for session ids)")
        p.add_argument("--out", required=True)
        a = p.parse_args(argv[1:])
        write_queries(a.out, a.count, a.seed, a.messages)
        print(f"wrote {a.count} queries to {a.out}", file=sys.stderr)
        return 0
    p = argparse.ArgumentParser(prog="corpus.py", description="write a seeded chat corpus (JSON Lines)")
    p.add_argument("--messages", type=int, required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    path = generate(a.out, a.messages, a.seed)
    print(f"wrote {a.messages} messages ({path.stat().st_size / 1e6:.1f} MB) to {path} "
          f"in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
