"""The tokens file of docs/SERVER.md's example parses (trailing # comments); errors name the file."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from convmem.server.tokens import TokensFileError, load_tokens, parse_tokens


def test_the_documented_example_parses() -> None:
    text = "# convmem tokens\nwrite 3f9c1e0b7a...   # the agent\nread  d41d8cd98f...   # a dashboard\n"
    assert [(t.scope, t.token) for t in parse_tokens(text)] == [("write", "3f9c1e0b7a..."), ("read", "d41d8cd98f...")]


def test_a_bad_line_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("write abc extra\n")
    os.chmod(path, 0o600)
    with pytest.raises(TokensFileError, match=f"tokens file {path}: line 1"):
        load_tokens(path)
