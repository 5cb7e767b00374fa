"""The README as a newcomer follows it: prerequisites stated, exactly two set-up commands, the
tool reference linked (and no "contract" the repository does not hold), the Python example runs."""
from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
SERVER = (ROOT / "docs" / "SERVER.md").read_text(encoding="utf-8")


def _section(text: str, title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, title
    return match.group(1)


def test_set_up_states_prerequisites_and_has_two_commands():
    setup = _section(README, "Set-up on a fresh machine")
    assert "Python 3.11" in setup and "C compiler" in setup and "python3-dev" in setup
    blocks = re.findall(r"```sh\n(.*?)```", setup, re.S)
    assert len(blocks) == 2 and all(len(b.strip().splitlines()) == 1 for b in blocks)
    assert "convmem serve" in blocks[0] and "pytest" in blocks[1]


def test_docs_cite_the_tool_reference_in_the_repository():
    assert (ROOT / "docs" / "TOOLS.md").is_file()
    assert "(docs/TOOLS.md)" in README and "(TOOLS.md)" in SERVER
    for text in (README, SERVER):
        assert "the contract" not in text and "the spec " not in text and "the spec'" not in text


def test_the_python_example_runs(tmp_path):
    code = re.search(r"## Python API\n\n```python\n(.*?)```", README, re.S).group(1)
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        scope: dict = {}
        exec(compile(code, "README.md", "exec"), scope)
    finally:
        os.chdir(here)
    assert scope["m"]["message"]["metadata"]["importance"] == 80
    assert [h["message_id"] for h in scope["hits"]] == [scope["m"]["message"]["message_id"]]
