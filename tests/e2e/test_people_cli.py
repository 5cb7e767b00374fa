"""The CLI for people: search with filters, sessions, show, delete, rebuild, health's exit status,
--json, global options before the command, usage errors, and no store created by a read."""
from __future__ import annotations

import json
from pathlib import Path

from e2e_helpers import RawStdioServer, run_cli

from convmem import cli
from convmem.store.logfile import LOG_NAME


def populate(data: Path, tmp: Path) -> None:
    rows = [
        {"session_id": "alpha", "role": "user", "content": "the quick brown fox jumps",
         "metadata": {"tags": ["animals"], "importance": 90, "memory_kind": "semantic"}},
        {"session_id": "alpha", "role": "assistant", "content": "a fox is a small canid"},
        {"session_id": "beta", "role": "user", "content": "a slow green turtle and a fox"},
    ]
    source = tmp / "rows.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = run_cli("--data-dir", str(data), "import", str(source))
    assert done.returncode == 0, done.stderr


def test_store_log_name_matches() -> None:
    assert cli.STORE_LOG == LOG_NAME


def test_search_filters_text_and_json(tmp_path: Path) -> None:
    data = tmp_path / "data"
    populate(data, tmp_path)
    done = run_cli("--data-dir", str(data), "search", "fox", "--json")
    assert done.returncode == 0
    assert len(json.loads(done.stdout)["results"]) == 3
    for extra, expected in ((["--session", "beta"], ["a slow green turtle and a fox"]),
                            (["--tags", "animals"], ["the quick brown fox jumps"]),
                            (["--kinds", "semantic"], ["the quick brown fox jumps"]),
                            (["--min-importance", "80"], ["the quick brown fox jumps"]),
                            (["--limit", "1", "--session", "alpha", "--tiers", "short"], None)):
        done = run_cli("search", "fox", "--json", "--data-dir", str(data), *extra)
        assert done.returncode == 0, (extra, done.stderr)
        got = [r["content"] for r in json.loads(done.stdout)["results"]]
        assert got == expected if expected is not None else len(got) == 1, (extra, got)
    done = run_cli("search", "turtle", "--data-dir", str(data))  # text: date, session, role, snippet
    lines = done.stdout.decode().splitlines()
    assert done.returncode == 0 and len(lines) == 2
    assert "  beta  user  " in lines[0] and lines[0][:4].isdigit()
    assert lines[1].strip() == "a slow green turtle and a fox"
    done = run_cli("search", "fox", "--kinds", "nonsense", "--data-dir", str(data))
    assert done.returncode == 1 and done.stderr.startswith(b"convmem: VALIDATION_ERROR")


def test_sessions_show_delete_rebuild(tmp_path: Path) -> None:
    data = tmp_path / "data"
    populate(data, tmp_path)
    done = run_cli("sessions", "--json", "--data-dir", str(data))
    sessions = json.loads(done.stdout)["sessions"]
    assert [(s["session_id"], s["message_count"]) for s in sessions] == [("alpha", 2), ("beta", 1)]
    done = run_cli("sessions", "--data-dir", str(data))
    assert b"alpha  2 messages" in done.stdout
    done = run_cli("show", "alpha", "--json", "--data-dir", str(data))
    history = json.loads(done.stdout)["history"]
    assert [m["content"] for m in history] == ["the quick brown fox jumps", "a fox is a small canid"]
    mid = history[1]["message_id"]
    done = run_cli("show", mid, "--data-dir", str(data))
    assert done.returncode == 0 and done.stdout.decode().splitlines()[1] == "a fox is a small canid"
    done = run_cli("show", "no-such-session", "--data-dir", str(data))
    assert done.returncode == 1 and b"NOT_FOUND" in done.stderr
    done = run_cli("delete", mid, "--data-dir", str(data))
    assert done.returncode == 0 and done.stdout == f"deleted {mid}\n".encode()
    done = run_cli("delete", mid, "--data-dir", str(data))
    assert done.returncode == 1 and b"NOT_FOUND" in done.stderr
    done = run_cli("rebuild", "--json", "--data-dir", str(data))
    assert done.returncode == 0 and json.loads(done.stdout)["messages_indexed"] == 2
    done = run_cli("health", "--data-dir", str(data))
    assert done.returncode == 0 and done.stdout.startswith(b"status OK: 2 messages in 2 sessions")


def test_the_cli_goes_through_a_running_owner(tmp_path: Path) -> None:
    data = tmp_path / "data"
    populate(data, tmp_path)
    host = RawStdioServer(data)
    host.initialize()
    try:
        payload, _ = host.call("write_message", {"session_id": "gamma", "role": "user", "content": "live fox"})
        done = run_cli("show", "gamma", "--json", "--data-dir", str(data))
        assert done.returncode == 0 and json.loads(done.stdout)["history"][0]["content"] == "live fox"
        done = run_cli("delete", payload["message"]["message_id"], "--data-dir", str(data))
        assert done.returncode == 0
        payload, _ = host.call("search_messages", {"query": "live"})
        assert payload["results"] == []
    finally:
        assert host.close() == 0


def test_read_commands_on_a_path_without_a_store(tmp_path: Path) -> None:
    for argv in (["health"], ["search", "x"], ["sessions"], ["show", "s"], ["export"]):
        done = run_cli("--data-dir", str(tmp_path / "typo"), *argv)
        assert done.returncode == 1 and b"no convmem store" in done.stderr, argv
    assert not (tmp_path / "typo").exists()
    (tmp_path / "empty").mkdir()
    done = run_cli("search", "x", "--data-dir", str(tmp_path / "empty"))
    assert done.returncode == 1 and b"holds no convmem store" in done.stderr
    assert list((tmp_path / "empty").iterdir()) == []


def test_usage_errors(tmp_path: Path) -> None:
    for port in ("70000", "-1", "http"):
        done = run_cli("serve", "--transport", "http", "--port", port, "--data-dir", str(tmp_path / "d"))
        assert done.returncode == 2 and b"--port" in done.stderr and b"Traceback" not in done.stderr
    assert not (tmp_path / "d").exists()
