"""Analyzer v2 rules (docs/SCORING.md "Analyzer"): words with digits, joined identifiers,
apostrophes, stems; checked on the compiled module and its twin, and the two against each other."""
from __future__ import annotations

import importlib
import random
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import convmem._core.pytokenizer as twin

compiled = importlib.import_module("convmem._core.tokenizer")


@pytest.fixture(scope="module", params=["convmem._core.tokenizer", "convmem._core.pytokenizer"])
def tk(request: pytest.FixtureRequest) -> ModuleType:
    return importlib.import_module(request.param)


@pytest.mark.parametrize("word", ["python3", "w65bcd49z", "0xc7f26", "2412", "e1234", "3d", "x86"])
def test_a_run_of_letters_and_digits_is_one_token(tk: ModuleType, word: str) -> None:
    assert tk.tokenize(f"see {word.upper()}, then") == ["see", word, "then"]


@pytest.mark.parametrize(("text", "tokens"), [
    ("tend_skill_sole", ["tend", "skill", "sole", "tend_skill_sole"]),
    ("ERR_UKRAINIAN_2412", ["err", "ukrainian", "2412", "err_ukrainian_2412"]),
    ("v2.3.1", ["v2", "3", "1", "v2.3.1"]),
    ("src/config.ts", ["src", "config", "ts", "src/config.ts"]),
    ("10:30", ["10", "30", "10:30"]),
    ("my-app", ["my", "app", "my-app"]),
    ("01ARZ3NDEKTSV4RRFFQ69G5FAV", ["01arz3ndektsv4rrffq69g5fav"]),
    # A joiner joins only between two letter-or-digit runs, and one at a time.
    ("a..b -x y- https://host", ["a", "b", "x", "y", "https", "host"]),
    # The chain stops at anything else: @ and spaces are separators.
    ("me@example.com", ["me", "example", "exampl", "com", "example.com"]),
])
def test_joined_identifiers_give_parts_then_the_whole(tk: ModuleType, text: str,
                                                      tokens: list[str]) -> None:
    assert tk.tokenize(text) == tokens


@pytest.mark.parametrize(("text", "tokens"), [
    ("it's", ["it"]),
    ("Caroline's", ["caroline", "carolin"]),
    ("don't", ["dont"]),
    ("it\u2019s don\u2019t", ["it", "dont"]),   # typographic apostrophe
    ("ｉｔ＇ｓ", ["it"]),                         # full-width forms
    ("the 90's", ["the", "90"]),
    ("students' 'quoted'", ["students", "student", "quoted", "quot"]),
    ("rock'n'roll", ["rocknroll", "rocknrol"]),
    ("Caroline's_file", ["caroline", "carolin", "file"]),  # a possessive ends the chain
])
def test_apostrophes_never_leave_single_letters(tk: ModuleType, text: str,
                                                tokens: list[str]) -> None:
    assert tk.tokenize(text) == tokens


def test_stems_follow_words_that_snowball_changes(tk: ModuleType) -> None:
    assert tk.tokenize("Deploying deployed deployment deploy") == [
        "deploying", "deploy", "deployed", "deploy", "deployment", "deploy", "deploy"]
    # Only 3 to 64 ASCII letters are stemmed: not words with digits, not other scripts.
    assert tk.tokenize("is as running3 café cafés") == ["is", "as", "running3", "café", "cafés"]
    assert tk.tokenize("ＲＵＮＮＩＮＧ") == ["running", "run"]
    keys = tk.token_keys("deploying")
    assert keys.tolist() == [tk.key_of_token("deploying"), tk.key_of_token("deploy")]


def test_long_words_keep_64_code_points_and_the_chain_keeps_all(tk: ModuleType) -> None:
    long = "a" * 70
    assert tk.tokenize(long) == ["a" * 64]
    assert tk.tokenize(f"{long}.b") == ["a" * 64, "b", f"{long}.b"]
    # The stem is of the word kept (64 letters), the same in both modules.
    kept = "ba" * 30 + "b" + "ing"
    assert len(kept) == 64 and twin._stem(kept) != kept
    assert tk.tokenize(kept + "zz") == [kept, twin._stem(kept)]


def test_every_token_has_its_key(tk: ModuleType) -> None:
    text = "Caroline's v2.3.1 deploying ERR_2412 東京で it's src/config.ts ｄｅｐｌｏｙｅｄ"
    assert tk.token_keys(text).tolist() == [tk.key_of_token(t) for t in tk.tokenize(text)]


ALPHABET = "ab sSiIng'\u2019_-./:1é東京ＳＡ＇ ﾃﾞ"


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=ALPHABET, max_size=40))
def test_twin_is_bit_identical_on_analyzer_edges(text: str) -> None:
    assert compiled.tokenize(text) == twin.tokenize(text)
    assert compiled.token_keys(text).tolist() == twin.token_keys(text).tolist()


def test_twin_is_bit_identical_on_long_text_without_the_gil() -> None:
    rng = random.Random(7)
    words = ["deploying", "it's", "v2.3.1", "Caroline's", "tend_skill_sole", "東京", "x" * 70,
             "running", "0xc7f26", "—", "don\u2019t", "ＤＥＰＬＯＹ"]
    text = " ".join(rng.choice(words) for _ in range(3000))  # over the nogil threshold
    assert compiled.token_keys(text).tolist() == twin.token_keys(text).tolist()
    assert compiled.tokenize(text) == twin.tokenize(text)


def test_the_stem_cache_refills_after_it_is_emptied() -> None:
    # More distinct words than the compiled cache holds: it is emptied and refilled, and the
    # answers stay those of the twin.
    rng = random.Random(3)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(4, 9))) + rng.choice(
        ("ing", "ed", "s", "ation", "")) for _ in range(60000)]
    for start in range(0, len(words), 2000):
        text = " ".join(words[start:start + 2000])
        assert compiled.token_keys(text).tolist() == twin.token_keys(text).tolist()
    text = " ".join(words[:500])
    assert compiled.token_keys(text).tolist() == twin.token_keys(text).tolist()


def test_a_query_of_several_words_looks_stemmed_words_up_by_their_stem(tk: ModuleType) -> None:
    key = tk.key_of_token
    # One word: the exact form and its stem (the exact form then ranks first).
    assert tk.query_keys("Deploying").tolist() == [key("deploying"), key("deploy")]
    # Several: the stem alone, so that a stemmable word does not weigh double.
    assert tk.query_keys("deploying the services v2.3").tolist() == [
        key("deploy"), key("the"), key("servic"), key("v2"), key("3"), key("v2.3")]
    assert tk.query_keys("東京 python3").tolist() == tk.token_keys("東京 python3").tolist()
    assert tk.query_keys("").tolist() == []


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=ALPHABET + "deploying ", max_size=40))
def test_twin_query_keys_are_bit_identical(text: str) -> None:
    assert compiled.query_keys(text).tolist() == twin.query_keys(text).tolist()
