"""The command line: --version, import (bad lines, stdin), export round trip, health, search, BUSY."""
from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from convmem import MemoryStore
from convmem.cli import default_data_dir, main
from convmem.importers import ProgressBar
from e2e_helpers import child_env, run_cli

ULID_A = "01HZY3M0000000000000000001"
ULID_B = "01HZY3M0000000000000000002"


def _jsonl(*items: Any) -> bytes:
    return b"".join((json.dumps(i, ensure_ascii=False).encode() if not isinstance(i, bytes) else i) + b"\n" for i in items)


def _run(capsysbinary: pytest.CaptureFixture[bytes], *argv: str) -> tuple[int, bytes, bytes]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsysbinary.readouterr()
    return code, out, err


def test_version_names_the_loaded_core() -> None:
    expected = "pure-python" if os.environ.get("CONVMEM_PURE", "") not in ("", "0") else "compiled"
    done = run_cli("--version")
    assert done.returncode == 0
    build = "" if expected == "pure-python" else ", build: (?:release|debug)[^;]*"
    m = re.fullmatch(rf"convmem \d+\.\d+\.\d+\S* \(core: {expected}{build}; (\S+)\)\n", done.stdout.decode())
    assert m, done.stdout
    # The directory the core was loaded from, the one this test process imports too.
    import convmem._core
    assert m.group(1) == str(Path(convmem._core.__file__).resolve().parent)
    assert os.path.isdir(m.group(1))
    pure = run_cli("--version", env=child_env(CONVMEM_PURE="1"))
    assert re.search(r"\(core: pure-python; \S+\)\n$", pure.stdout.decode()), pure.stdout


def test_import_reports_every_bad_line_and_keeps_going(tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    source = tmp_path / "in.jsonl"
    source.write_bytes(
        _jsonl(
            {"session_id": "s1", "role": "user", "content": "first"},  # 1
            b'{"session_id": "s1", "role": ',  # 2 invalid JSON
            {"session_id": "s1", "role": "assistant", "content": "second", "metadata": {"tags": ["a"]}},  # 3
            [1, 2, 3],  # 4 not an object
            {"session_id": "s1", "role": "user", "content": "x", "colour": "red"},  # 5 unknown field
            {"session_id": "s1", "content": "no role"},  # 6 missing field
            {"session_id": "s1", "role": "robot", "content": "bad role"},  # 7 store validation
            b"   ",  # 8 blank: skipped silently
            {"session_id": "s2", "role": "user", "content": "with id", "message_id": ULID_A, "timestamp": 1720843200000},  # 9
            {"session_id": "s2", "role": "user", "content": "same id", "message_id": ULID_A},  # 10 duplicate id
            b'{"session_id": "s2", "role": "user", "content": "\\ud800"}',  # 11 lone surrogate
            b'{"session_id": "s2", "role": "user", "content": "\xff\xfe"}',  # 12 invalid UTF-8
            {"session_id": "s2", "role": "user", "content": "meta", "metadata": "not an object"},  # 13
            {"session_id": "s2", "role": "user", "content": "bad meta", "metadata": {"importance": 101}},  # 14
            {"session_id": "s2", "role": "system", "content": "last"},  # 15
        )
    )
    data = tmp_path / "data"
    code, out, err = _run(capsysbinary, "import", str(source), "--data-dir", str(data))
    assert code == 0  # the file was read: rejected lines are reported, not a failure
    lines = out.decode().splitlines()
    assert lines[0] == "imported 4 messages, rejected 10 lines"
    rejected = {int(m.group(1)): m.group(2) for m in (re.fullmatch(r"line (\d+): (.*)", line) for line in lines[1:]) if m}
    assert sorted(rejected) == [2, 4, 5, 6, 7, 10, 11, 12, 13, 14]
    assert rejected[2].startswith("invalid JSON")
    assert rejected[4] == "expected a JSON object"
    assert rejected[5] == "unknown field 'colour'"
    assert rejected[6] == "missing field 'role'"
    assert rejected[7].startswith("VALIDATION_ERROR") and "role" in rejected[7]
    assert rejected[10].startswith("CONFLICT")
    assert rejected[13] == "metadata must be a JSON object"
    assert rejected[14].startswith("VALIDATION_ERROR") and "importance" in rejected[14]
    assert b"importing" not in err  # stderr is not a terminal: no progress bar
    with MemoryStore.open(data) as store:
        assert store.get_system_health()["active_messages"] == 4
        contents = [m["content"] for m in store.read_messages(session_id="s2")["history"]]
    assert contents == ["with id", "last"]


def test_import_from_stdin_as_a_subprocess(tmp_path: Path) -> None:
    lines = _jsonl(*({"session_id": "piped", "role": "user", "content": f"メッセージ {i}"} for i in range(2500)))
    done = run_cli("import", "-", "--data-dir", str(tmp_path / "data"), input=lines)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"imported 2500 messages, rejected 0 lines\n"
    with MemoryStore.open(tmp_path / "data") as store:
        history = store.read_messages(session_id="piped", limit=1000)
        assert [m["content"] for m in history["history"][:2]] == ["メッセージ 0", "メッセージ 1"]
        assert store.get_system_health()["active_messages"] == 2500


def test_progress_bar_draws_a_bar_then_ends_the_line() -> None:
    stream = io.StringIO()
    bar = ProgressBar(stream, total_bytes=200)
    bar.update(100, 10, force=True)
    bar.close()
    assert "[" + "#" * 15 + "-" * 15 + "]" in stream.getvalue() and "50.0%" in stream.getvalue()
    assert stream.getvalue().endswith("\n")


def _populate(data: Path) -> None:
    with MemoryStore.open(data) as store:
        first = store.write_message(
            session_id="会議", role="user", content="東京で会議", metadata_json=json.dumps({"tags": ["x"], "summary": "要約", "importance": 70})
        )["message"]
        second = store.write_message(
            session_id="会議",
            role="assistant",
            content="了解",
            metadata_json=json.dumps({"relations": [{"type": "derived_from", "message_id": first["message_id"]}], "tool_call_id": "t1"}),
        )["message"]
        store.update_message(message_id=second["message_id"], content="了解しました")
        gone = store.write_message(session_id="other", role="user", content="to be deleted")["message"]
        store.write_message(session_id="other", role="system", content="kept \"quoted\" \\ and \x01")
        store.delete_message(message_id=gone["message_id"])


def test_export_import_round_trip_is_identical(tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    _populate(tmp_path / "a")
    code, exported, _ = _run(capsysbinary, "export", "--data-dir", str(tmp_path / "a"))
    assert code == 0
    items = [json.loads(line) for line in exported.splitlines()]
    assert len(items) == 3 and "to be deleted" not in exported.decode()
    dump = tmp_path / "dump.jsonl"
    dump.write_bytes(exported)
    code, out, _ = _run(capsysbinary, "import", str(dump), "--data-dir", str(tmp_path / "b"))
    assert (code, out) == (0, b"imported 3 messages, rejected 0 lines\n")
    code, again, _ = _run(capsysbinary, "export", "--data-dir", str(tmp_path / "b"))
    assert again == exported
    # The stores answer identically, not only their exports.
    with MemoryStore.open(tmp_path / "a") as a, MemoryStore.open(tmp_path / "b") as b:
        for item in items:
            assert a.read_messages(view="context", message_id=item["message_id"]) == b.read_messages(
                view="context", message_id=item["message_id"]
            )
        assert a.read_messages(view="sessions") == b.read_messages(view="sessions")
    code, one_session, _ = _run(capsysbinary, "export", "--session-id", "会議", "--data-dir", str(tmp_path / "b"))
    assert [json.loads(line)["session_id"] for line in one_session.splitlines()] == ["会議", "会議"]


def test_health_and_search_print_json(tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    data = tmp_path / "data"
    _populate(data)
    code, out, _ = _run(capsysbinary, "health", "--json", "--data-dir", str(data))
    health = json.loads(out)
    assert code == 0 and health["status"] == "OK" and health["active_messages"] == 3
    code, out, _ = _run(capsysbinary, "search", "東京", "--json", "--data-dir", str(data), "--limit", "5")
    results = json.loads(out)["results"]
    assert code == 0 and [r["content"] for r in results] == ["東京で会議"]
    code, out, _ = _run(capsysbinary, "search", "東京", "--json", "--session-id", "other", "--data-dir", str(data))
    assert json.loads(out) == {"results": []}
    code, out, err = _run(capsysbinary, "search", "東京", "--limit", "0", "--data-dir", str(data))
    assert code == 1 and out == b"" and b"VALIDATION_ERROR" in err and b"limit" in err


def test_held_directory_is_busy_for_every_command(tmp_path: Path) -> None:
    data = tmp_path / "data"
    source = tmp_path / "in.jsonl"
    source.write_bytes(_jsonl({"session_id": "s", "role": "user", "content": "x"}))
    with MemoryStore.open(data):
        for argv in (["health"], ["search", "x"], ["export"], ["import", str(source)]):
            done = run_cli(*argv, "--data-dir", str(data))
            assert done.returncode == 1, argv
            assert b"BUSY" in done.stderr and str(data).encode() in done.stderr, done.stderr
            assert done.stdout == b""


def test_data_directory_resolution(tmp_path: Path) -> None:
    home = Path.home()
    assert default_data_dir({"CONVMEM_DATA_DIR": "/x/y", "XDG_DATA_HOME": "/z"}) == Path("/x/y")
    assert default_data_dir({"XDG_DATA_HOME": "/z"}) == Path("/z/convmem")
    assert default_data_dir({"XDG_DATA_HOME": "relative"}) == home / ".local/share/convmem"
    assert default_data_dir({}) == home / ".local/share/convmem"
    # The environment variable reaches the real command too.
    # (a read command does not create a store at a mistyped path; import does)
    done = run_cli("health", env=child_env(CONVMEM_DATA_DIR=str(tmp_path / "from-env")))
    assert done.returncode == 1 and b"no convmem store" in done.stderr
    assert not (tmp_path / "from-env").exists()
    source = tmp_path / "one.jsonl"
    source.write_bytes(_jsonl({"session_id": "s", "role": "user", "content": "x"}))
    done = run_cli("import", str(source), env=child_env(CONVMEM_DATA_DIR=str(tmp_path / "from-env")))
    assert done.returncode == 0 and (tmp_path / "from-env").is_dir()
    done = run_cli("health", "--json", env=child_env(CONVMEM_DATA_DIR=str(tmp_path / "from-env")))
    assert done.returncode == 0 and json.loads(done.stdout)["active_messages"] == 1


def test_usage_errors_exit_2(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    code, out, err = _run(capsysbinary)
    assert code == 2 and out == b"" and b"serve" in err
    code, _, err = _run(capsysbinary, "serve", "--transport", "carrier-pigeon")
    assert code == 2 and b"invalid choice" in err
