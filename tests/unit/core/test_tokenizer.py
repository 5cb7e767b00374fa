"""Tokenizer rules (docs/DESIGN.md section 1), checked on the compiled module and its pure twin."""
from __future__ import annotations

import importlib
import unicodedata
from types import ModuleType

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import convmem._core.pytokenizer as twin

compiled = importlib.import_module("convmem._core.tokenizer")  # the extension, even under CONVMEM_PURE=1

MASK62 = (1 << 62) - 1
WORD, BIGRAM, UNIGRAM = 0b00, 0b10, 0b11


@pytest.fixture(scope="module", params=["convmem._core.tokenizer", "convmem._core.pytokenizer"])
def tk(request: pytest.FixtureRequest) -> ModuleType:
    return importlib.import_module(request.param)


def kinds(keys: np.ndarray) -> list[int]:
    return [int(k) >> 62 for k in keys]


def reference_word_key(data: bytes) -> int:
    """Independent restatement of the spec: FNV-1a 64, splitmix64 finaliser, 62 bits, 0 -> 1."""
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) % 2**64
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) % 2**64
    h ^= h >> 31
    return (h & MASK62) or 1


def test_compiled_module_is_the_extension() -> None:
    assert compiled.__file__ is not None and compiled.__file__.endswith((".so", ".pyd"))


def test_versions(tk: ModuleType) -> None:
    assert tk.TOKENIZER_VERSION == 2
    assert tk.UNICODE_VERSION == unicodedata.unidata_version


def test_word_hash_known_answers(tk: ModuleType) -> None:
    # Published FNV-1a 64 vector: fnv1a64(b"a") == 0xaf63dc4c8601ec8c.
    h = 0xAF63DC4C8601EC8C
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) % 2**64
    h ^= h >> 31
    assert tk.hash_utf8(b"a") == h & MASK62
    for data in (b"", b"python", "データ".encode(), bytes(range(256))):
        assert tk.hash_utf8(data) == reference_word_key(data)
    assert tk.hash_utf8(bytearray(b"python")) == tk.hash_utf8(memoryview(b"python"))
    assert tk.key_of_token("python") == reference_word_key(b"python")


def test_normalize(tk: ModuleType) -> None:
    assert tk.normalize("ＡＢＣ　１２３") == "abc 123"
    assert tk.normalize("Straße") == "strasse"
    assert tk.normalize("ﾃﾞｰﾀ") == "データ"
    # The ASCII fast path must agree with NFKC + casefold on every ASCII character.
    ascii_all = "".join(map(chr, range(128)))
    assert tk.normalize(ascii_all) == unicodedata.normalize("NFKC", ascii_all).casefold()


def test_english_words_and_numbers(tk: ModuleType) -> None:
    text = "Hello, World! I have 42 apples and 7 pears."
    assert tk.tokenize(text) == ["hello", "world", "i", "have", "42", "apples", "appl", "and", "7",
                                 "pears", "pear"]
    keys = tk.token_keys(text)
    assert keys.dtype == np.uint64
    assert list(keys) == [reference_word_key(t.encode()) for t in tk.tokenize(text)]
    # Duplicates are kept, in text order.
    assert list(tk.token_keys("go go go")) == [tk.key_of_token("go")] * 3


def test_letters_and_digits_make_one_word(tk: ModuleType) -> None:
    assert tk.tokenize("Python3.12で") == ["python3", "12", "python3.12", "で"]
    assert tk.tokenize("abc123def w65bcd49z 0xC7F26 2412") == ["abc123def", "w65bcd49z", "0xc7f26",
                                                              "2412"]


def test_full_width_latin_equals_ascii(tk: ModuleType) -> None:
    assert list(tk.token_keys("Ｐｙｔｈｏｎ")) == list(tk.token_keys("python"))
    assert list(tk.token_keys("ＰＹＴＨＯＮ ３")) == list(tk.token_keys("Python 3"))


def test_half_width_katakana_equals_full_width(tk: ModuleType) -> None:
    assert list(tk.token_keys("ﾃﾞｰﾀﾍﾞｰｽ")) == list(tk.token_keys("データベース"))


def test_long_vowel_mark_stays_in_katakana_run(tk: ModuleType) -> None:
    assert tk.tokenize("データベース") == ["デー", "ータ", "タベ", "ベー", "ース"]
    assert tk.tokenize("サーバー") == ["サー", "ーバ", "バー"]


def test_katakana_middle_dot_separates(tk: ModuleType) -> None:
    assert tk.tokenize("ジョン・スミス") == ["ジョ", "ョン", "スミ", "ミス"]


@pytest.mark.parametrize(
    ("query", "sentence"),
    [
        ("東京", "明日は東京で会議があります。"),
        ("参加", "昨日のイベントに参加しました"),
        ("設定", "このアプリの設定を変更してください"),
        ("データベース", "新しいデータベースを作成しました"),
        ("データベース", "ﾃﾞｰﾀﾍﾞｰｽのバックアップ"),
    ],
)
def test_japanese_word_keys_are_found_in_sentences(tk: ModuleType, query: str, sentence: str) -> None:
    query_keys = set(tk.token_keys(query).tolist())
    assert query_keys and query_keys <= set(tk.token_keys(sentence).tolist())


def test_single_cjk_character_is_a_unigram(tk: ModuleType) -> None:
    keys = tk.token_keys("猫 is a cat, 犬 is a dog")
    assert tk.tokenize("猫 is a cat, 犬 is a dog")[0] == "猫"
    cjk = [int(k) for k in keys if int(k) >> 62 == UNIGRAM]
    assert [k & MASK62 for k in cjk] == [ord("猫"), ord("犬")]
    assert cjk[0] == (0b11 << 62) | ord("猫")
    assert tk.key_of_token("猫") == cjk[0]


def test_bigram_key_packs_both_code_points(tk: ModuleType) -> None:
    (key,) = tk.token_keys("東京").tolist()
    assert key == (0b10 << 62) | (ord("東") << 21) | ord("京")
    assert ((key >> 21) & 0x1FFFFF, key & 0x1FFFFF) == (ord("東"), ord("京"))
    assert tk.key_of_token("東京") == key


def test_hangul(tk: ModuleType) -> None:
    assert tk.tokenize("한국어 텍스트") == ["한국", "국어", "텍스", "스트"]
    assert kinds(tk.token_keys("한국어 텍스트")) == [BIGRAM] * 4
    assert set(tk.token_keys("국어").tolist()) <= set(tk.token_keys("한국어를 공부").tolist())


def test_supplementary_plane_han(tk: ModuleType) -> None:
    # U+20BB7 (𠮷) is stored in a 4-byte-kind str and is inside the Han ranges.
    assert tk.tokenize("𠮷野家") == ["𠮷野", "野家"]
    assert tk.token_keys("𠮷")[0] == (0b11 << 62) | 0x20BB7


def test_emoji_and_punctuation_produce_no_tokens(tk: ModuleType) -> None:
    for text in ("😀🎉👍", "!?.,;:()[]{}<>", "。、「」『』…・〜", "— – ★ ♪ → ©"):
        keys = tk.token_keys(text)
        assert keys.dtype == np.uint64 and keys.size == 0, text
    assert tk.tokenize("good😀job") == ["good", "job"]


def test_long_word_keeps_first_64_letters(tk: ModuleType) -> None:
    word = "".join(chr(ord("a") + i % 26) for i in range(10_000))
    assert tk.tokenize(word) == [word[:64]]
    assert list(tk.token_keys(word)) == [reference_word_key(word[:64].encode())]
    # The rest of the run is skipped, not a new token; the next run starts a new one.
    assert tk.tokenize(word + " end") == [word[:64], "end"]
    assert tk.tokenize("9" * 100) == ["9" * 64]
    assert tk.tokenize("é" * 65) == ["é" * 64]


def test_mixed_scripts(tk: ModuleType) -> None:
    assert tk.tokenize("Hello世界123テスト") == ["hello", "世界", "123", "テス", "スト"]
    assert tk.tokenize("Привет, мир! Καλημέρα") == ["привет", "мир", "καλημέρα"]
    assert tk.tokenize("naïve café") == ["naïve", "café"]
    assert kinds(tk.token_keys("Hello世界 猫")) == [WORD, BIGRAM, UNIGRAM]


def test_empty_and_whitespace(tk: ModuleType) -> None:
    for text in ("", " ", "\t\n\r \u3000\u00a0"):
        keys = tk.token_keys(text)
        assert isinstance(keys, np.ndarray) and keys.dtype == np.uint64 and keys.shape == (0,)
        assert tk.tokenize(text) == []


def test_key_bit_layout(tk: ModuleType) -> None:
    text = "word 12 東京タワー 猫 x"
    keys = tk.token_keys(text).tolist()
    assert [k >> 62 for k in keys] == [WORD, WORD, BIGRAM, BIGRAM, BIGRAM, BIGRAM, UNIGRAM, WORD]
    assert all(k != 0 for k in keys)


def test_normalization_can_add_tokens(tk: ModuleType) -> None:
    # U+337F (one code point) expands to 株式会社: more tokens than input code points.
    assert tk.tokenize("㍿") == ["株式", "式会", "会社"]
    assert list(tk.token_keys("㍿" * 500)) == list(twin.token_keys("㍿" * 500))
    assert len(tk.token_keys("㍿" * 500)) == 4 * 500 - 1


def test_lone_surrogates_are_separators(tk: ModuleType) -> None:
    assert tk.tokenize("\ud800abc") == ["abc"]
    assert tk.tokenize("ab\udfffcd") == ["ab", "cd"]
    assert list(tk.token_keys("ab\udfffcd")) == list(tk.token_keys("ab cd"))
    assert tk.tokenize("東\udc00京") == ["東", "京"]
    assert tk.token_keys("\ud800\udc00").size == 0  # an unpaired pair is still two surrogates
    # key_of_token accepts any str: surrogates are hashed through 'surrogatepass'.
    assert tk.key_of_token("\ud800") == reference_word_key(b"\xed\xa0\x80")


def test_combining_characters_compose_across_piece_boundaries(tk: ModuleType) -> None:
    # The compiled module normalizes only the spans that need it; marks that combine with the
    # character before them must still compose.
    assert list(tk.token_keys("Cafe\u0301 au lait")) == list(tk.token_keys("café au lait"))
    assert tk.tokenize("か\u3099くせい") == ["がく", "くせ", "せい"]
    assert tk.tokenize("가\u11a8 x") == ["각", "x"]
    assert tk.tokenize("東京ﾃﾞｰﾀＡＢＣ会議") == ["東京", "京デ", "デー", "ータ", "abc", "会議"]
    assert tk.tokenize("Ａ\u0301Ｂ　ｃ！") == ["áb", "c"]


def test_inert_code_points_are_inert() -> None:
    """Characters the compiled module does not pass to NFKC must normalize to what its scanner
    reads them as (ASCII upper case aside, folded by the scanner) and be starters that never
    combine with the character before them (not ccc != 0, not the second of a canonical pair,
    not Hangul V/T jamo), so that text can be cut before them."""
    seconds = set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))
    for cp in range(0x110000):
        decomposition = unicodedata.decomposition(chr(cp))
        if decomposition and not decomposition.startswith("<"):
            parts = decomposition.split()
            if len(parts) == 2:
                seconds.add(int(parts[1], 16))
    inert = dict(compiled._inert_code_points())
    assert set(range(128)) <= inert.keys() and ord("東") in inert and ord("ｱ") not in inert
    assert inert[ord("Ａ")] == ord("A") and inert[0x3000] == ord(" ")
    for cp, read_as in inert.items():
        ch = chr(cp)
        assert twin.normalize(ch) == chr(read_as).lower(), hex(cp)
        assert unicodedata.combining(ch) == 0 and cp not in seconds, hex(cp)


def test_non_str_is_rejected(tk: ModuleType) -> None:
    for fn in (tk.token_keys, tk.tokenize, tk.normalize):
        with pytest.raises(TypeError):
            fn(None)
        with pytest.raises(TypeError):
            fn(b"bytes")


@pytest.mark.parametrize("size", [1023, 1024, 1025, 4095, 4096, 4097])
def test_buffer_size_boundaries(size: int) -> None:
    # The compiled module switches buffers at 1024 code points and releases the GIL from 4096.
    unit = "ab 東京ﾃﾞ"  # 7 code points, 6 after normalization (ﾃﾞ -> デ)
    text = (unit * (size // 7 + 1))[:size]
    assert compiled.token_keys(text).tolist() == twin.token_keys(text).tolist()
    cjk = ("東京" * size)[:size]  # size - 1 bigrams: the key buffer is filled to its capacity
    assert compiled.token_keys(cjk).tolist() == twin.token_keys(cjk).tolist()
    assert len(compiled.token_keys(cjk)) == size - 1


def test_long_text_uses_same_rules(tk: ModuleType) -> None:
    # Long enough for the compiled scanner to release the GIL; compared with the twin.
    text = "会議の議事録 Meeting notes v2 ﾃﾞｰﾀ 한국 😀 " * 400
    assert list(tk.token_keys(text)) == list(twin.token_keys(text))


INTERESTING = (
    "aZ09 _-.,!?\t\nßǅİﬁ①²٣Ⅻ"
    "東京都設定参加々〆〇ぁゔゟァヺ・ーヿㇰ"
    "ｱﾞｰﾃﾞﾀ　ＡＢ１２"
    "한국ᄀㄱꥠힰ"
    "𠮷𪚲😀\u0301\u3099\u200d\ufeff"
    "EeÉé가각\u11a8\u1161ᄀ\u0308ﾞﾟ\u309b㍿ＡＺ"
)
texts = st.text(
    alphabet=st.one_of(
        st.sampled_from(INTERESTING),
        st.characters(),  # any code point except surrogates
        st.characters(categories=["Cs"]),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(texts)
def test_compiled_matches_twin(text: str) -> None:
    assert compiled.token_keys(text).tolist() == twin.token_keys(text).tolist()
    assert compiled.tokenize(text) == twin.tokenize(text)
    assert compiled.normalize(text) == twin.normalize(text)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=80))
def test_surrogate_free_text_matches_twin(text: str) -> None:
    assert compiled.token_keys(text).tolist() == twin.token_keys(text).tolist()


@settings(max_examples=150, deadline=None)
@given(text=texts)
def test_keys_are_keys_of_tokens(tk: ModuleType, text: str) -> None:
    keys = tk.token_keys(text).tolist()
    assert [tk.key_of_token(t) for t in tk.tokenize(text)] == keys
    assert all(k != 0 for k in keys)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_hash_utf8_matches_twin(data: bytes) -> None:
    assert compiled.hash_utf8(data) == twin.hash_utf8(data) == reference_word_key(data)
