"""The chat-history importers on the fixtures of tests/fixtures/import: each trap of each format,
detection by content, re-import and a grown file, and import -> export -> import round trips."""
from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from convmem import MemoryStore
from convmem.importers.common import Options, derive_id, iso_ms
from convmem.importers.jsonl import import_jsonl, time_ms
from convmem.importers.runner import run_import
from convmem.importers.sources import detect_file, expand

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "import"
CC_PROJECT = FIX / "claude" / "projects" / "-home-ana-src-shop"
S1 = "4c2d9a10-5b7e-4f1a-9c3d-2e8f6a1b0c01"


def do_import(store: MemoryStore, *paths: Path, fmt: str | None = None, **opt: Any):
    problems: list[tuple[str, str]] = []
    sources = []
    for p in paths:
        sources += expand(str(p), fmt, problems)
    reports = run_import(store, sources, Options(**opt))
    return {
        (Path(r.path.split(".zip:")[0]).name + ".zip:" + r.path.split(".zip:")[1]
         if ".zip:" in r.path else Path(r.path).name): r for r in reports}, problems


def messages(store: MemoryStore) -> list[dict[str, Any]]:
    return list(store.export_messages())


def by_session(store: MemoryStore) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for m in messages(store):
        out.setdefault(m["session_id"], []).append(m)
    return out


# -- ids and times ------------------------------------------------------------------------------
def test_derived_ids_are_stable_and_carry_the_message_time() -> None:
    a = derive_id(1772438400000, "claude-code", "uuid", "u1")
    assert a == derive_id(1772438400000, "claude-code", "uuid", "u1")
    assert a != derive_id(1772438400000, "claude-code", "uuid", "u2")
    from convmem.validation import ulid

    assert int.from_bytes(ulid("m", a)[:6], "big") == 1772438400000


def test_times_iso_and_seconds_never_milliseconds() -> None:
    assert iso_ms("2026-03-02T08:00:00.123Z") == 1772438400123
    assert iso_ms("2026-03-02T08:00:01.123Z") == 1772438401123  # (the cached minute path)
    assert iso_ms("2026-03-02T17:00:00+09:00") == 1772438400000
    assert iso_ms("2026-03-02T08:00:00") == 1772438400000  # no offset: UTC
    assert iso_ms("not a time") is None
    assert time_ms(1772438400) == 1772438400000  # can only be seconds
    assert time_ms(1772438400.5) == 1772438400500
    assert time_ms(1772438400000) == 1772438400000  # milliseconds stay
    assert time_ms(5000) == 5000  # small integers stay milliseconds (the contract)
    assert time_ms("2026-03-02T08:00:00Z") == 1772438400000


# -- detection ------------------------------------------------------------------------------------
@pytest.mark.parametrize("rel, fmt", [
    (f"claude/projects/-home-ana-src-shop/{S1}.jsonl", "claude-code"),
    ("codex/sessions/2026/03/02/rollout-2026-03-02T09-00-00-0190aaaa-0000-7000-8000-000000000001.jsonl", "codex"),
    ("codex/sessions/2026/02/20/rollout-2026-02-20T10-00-00-0190aaaa-0000-7000-8000-000000000002.jsonl.zst", "codex"),
    ("chatgpt/conversations.json", "chatgpt"),
    ("claude-ai/conversations.json", "claude-ai"),  # the same file name, told apart by content
    ("gemini/tmp/9f3c0d1e2a/chats/session-2026-03-02T11-00-7a1e0c52.jsonl", "gemini"),
    ("gemini/tmp/9f3c0d1e2a/chats/session-2026-03-02T11-00-7a1e0c52.json", "gemini"),
    ("convmem/mixed-times.jsonl", "convmem"),
])
def test_format_is_detected_by_content(rel: str, fmt: str) -> None:
    assert detect_file(str(FIX / rel)) == fmt


# -- Claude Code ------------------------------------------------------------------------------------
def test_claude_code_project_folder(store: MemoryStore) -> None:
    reports, problems = do_import(store, CC_PROJECT)
    assert problems == []  # journal.jsonl and .meta.json are not offered as transcripts
    main = reports[f"{S1}.jsonl"]
    assert main.fmt == "claude-code" and main.error is None
    assert main.records == 21
    assert main.imported == 15
    assert main.cut == 1
    assert main.skipped["unknown type x-future-record"] == 1
    assert main.skipped["not conversation (summary)"] == 1  # another transcript's summary (trap 2)
    assert main.skipped["hidden reasoning (--reasoning imports it)"] == 1
    sessions = by_session(store)
    main_msgs = sessions[f"claude-code:{S1}"]
    words = [(m["role"], m["content"]) for m in main_msgs if m["metadata"]["memory_kind"] == "conversation"]
    assert words == [
        ("user", "Why does `make test` fail on the checkout module?"),
        ("assistant", "Let me run the tests to see the failure."),  # merged by message.id (trap 3)
        ("assistant", "The `prices` fixture lives in conftest.py of another folder; move it to tests/conftest.py."),
        ("user", "Search the repo for other uses of that fixture."),
        ("user", "Run them once more please."),  # its parent was never written (trap 1)
        ("assistant", "Done: both tests pass now."),  # written before its parent (trap 1)
    ]
    # /branch wrote the answer twice: one message (trap 2)
    assert sum(m["content"].startswith("The `prices` fixture") for m in main_msgs) == 1
    injected = [m for m in main_msgs if "injected" in m["metadata"]["tags"]]
    assert {m["content"][:20] for m in injected} == {"<command-name>/clear", "Caveat: The messages",
                                                     "<system-reminder>The", "This session is bein",
                                                     "[Request interrupted"}
    assert all(m["role"] == "system" and m["metadata"]["memory_kind"] in ("episode", "summary")
               for m in injected)
    compact = [m for m in main_msgs if "compact-summary" in m["metadata"]["tags"]]
    assert len(compact) == 1 and compact[0]["metadata"]["memory_kind"] == "summary"
    result = next(m for m in main_msgs if m["metadata"].get("tool_call_id") == "toolu_01Make"
                  and "tool-result" in m["metadata"]["tags"])
    assert set(result["metadata"]["tags"]) == {"tool-result", "tool-error", "cut"}
    assert len(result["content"].encode()) <= 16384 and "more bytes]" in result["content"]
    call = next(m for m in main_msgs if "tool-call" in m["metadata"]["tags"]
                and m["metadata"]["tool_call_id"] == "toolu_01Task")
    assert call["role"] == "assistant" and call["content"].startswith("Task: ")
    assert main_msgs[0]["timestamp"] == iso_ms("2026-03-02T08:00:00.000Z")
    # trap 5: subagent transcripts in their own sessions, linked to the parent's tool call
    child = sessions[f"claude-code:{S1}/agent-c3d4e5f6"]
    assert [m["content"] for m in child] == ["Find every use of the prices fixture.",
                                             "Two uses: test_cart.py and test_promo.py."]
    assert child[0]["metadata"]["tool_call_id"] == "toolu_01Task"  # via toolUseResult.agentId
    assert child[0]["metadata"]["relations"] == [{"type": "derived_from", "message_id": call["message_id"]}]
    assert all("subagent" in m["metadata"]["tags"] for m in child)
    assert sessions[f"claude-code:{S1}/agent-a1b2c3d4"][0]["metadata"]["tool_call_id"] == "toolu_01Make"  # .meta.json
    # the resumed session's copied first line is the first session's message, present
    resumed = reports["9e81f0aa-1c2b-4d3e-8f90-a1b2c3d4e502.jsonl"]
    assert (resumed.imported, resumed.present, resumed.rejected) == (2, 2, 0)


def test_claude_code_options_reasoning_and_drop(store: MemoryStore) -> None:
    reports, _ = do_import(store, CC_PROJECT / f"{S1}.jsonl", reasoning=True, drop_tools=True,
                           drop_injected=True)
    r = reports[f"{S1}.jsonl"]
    msgs = messages(store)
    assert not any(set(m["metadata"]["tags"]) & {"tool-call", "tool-result", "injected"} for m in msgs)
    thinking = [m for m in msgs if "reasoning" in m["metadata"]["tags"]]
    assert [m["content"] for m in thinking] == ["Probably a missing fixture; look at the Makefile."]
    assert r.skipped["tool call or result (dropped by --drop tools)"] == 4
    # the /clear command, the caveat, the reminder, the compaction summary, the interruption
    assert r.skipped["injected context (dropped by --drop injected)"] == 5


# -- Codex ------------------------------------------------------------------------------------------
def test_codex_rollouts_plain_compressed_and_forked(store: MemoryStore) -> None:
    reports, problems = do_import(store, FIX / "codex")
    assert problems == []  # history.jsonl is no transcript: ignored quietly
    assert len(reports) == 3
    sessions = by_session(store)
    t1 = sessions["codex:0190aaaa-0000-7000-8000-000000000001"]
    words = [(m["role"], m["content"]) for m in t1 if m["metadata"]["memory_kind"] == "conversation"]
    assert words == [("user", "List open ports."), ("assistant", "Only port 22 is open."),
                     ("user", "<plugin> is the name of my nginx module; is it loaded?"),  # typed (trap 3)
                     ("assistant", "Yes: nginx -V lists it."),
                     ("user", "Back again: is port 80 open now?"), ("assistant", "Yes, nginx listens on 80.")]
    main = next(r for name, r in reports.items() if name.endswith("000000000001.jsonl"))
    assert main.skipped["duplicate (written twice by Codex)"] == 2  # trap 2
    assert main.skipped["replacement history of a compaction (not indexed)"] == 1  # trap 4
    assert main.skipped["unknown type x_future_item"] == 1
    injected = [m for m in t1 if "injected" in m["metadata"]["tags"]]
    assert any(m["content"].startswith("<environment_context>") or "<environment_context>" in m["content"] for m in injected)
    assert any(m["content"].startswith("# AGENTS.md") for m in injected)
    tool = [m for m in t1 if m["metadata"].get("tool_call_id") == "call_1"]
    assert sorted(tuple(m["metadata"]["tags"]) for m in tool) == [("tool-call",), ("tool-result",)]
    assert [m["metadata"]["memory_kind"] for m in t1 if "compact-summary" in m["metadata"]["tags"]] == ["summary"]
    # trap 1: the week-old .jsonl.zst is read
    assert [m["content"] for m in sessions["codex:0190aaaa-0000-7000-8000-000000000002"]] == [
        "Rotate the nginx logs weekly.", "Added /etc/logrotate.d/nginx with weekly rotation."]
    # trap 5: the fork's copied history is not imported again
    fork = sessions["codex:0190aaaa-0000-7000-8000-000000000003"]
    assert [m["content"] for m in fork] == ["In this fork: close port 22.", "I would not: it is your SSH session."]


def test_codex_plain_twin_wins_over_zst(tmp_path: Path, store: MemoryStore) -> None:
    src = FIX / "codex/sessions/2026/02/20"
    zst = next(src.glob("*.zst"))
    shutil.copy(zst, tmp_path / zst.name)
    import zstandard

    plain = zstandard.ZstdDecompressor().stream_reader(zst.open("rb")).read()
    plain += b'{"timestamp":"2026-03-01T10:00:00.000Z","type":"event_msg","payload":{"type":"user_message","message":"Appended after a week."}}\n'
    (tmp_path / zst.name[:-4]).write_bytes(plain)
    reports, _ = do_import(store, tmp_path)
    assert list(reports) == [zst.name[:-4]]
    assert [m["content"] for m in messages(store)][-1] == "Appended after a week."


# -- ChatGPT ----------------------------------------------------------------------------------------
def test_chatgpt_branch_last_seen_and_2026_shapes(store: MemoryStore) -> None:
    reports, _ = do_import(store, FIX / "chatgpt" / "conversations.json")
    r = reports["conversations.json"]
    assert r.records == 3 and r.skipped["conversation without mapping or id"] == 1  # trap 3
    sessions = by_session(store)
    c1 = sessions["chatgpt:68c1a0f2-1111-8000-9000-00000000c001"]
    words = [(m["role"], m["content"]) for m in c1 if m["metadata"]["memory_kind"] == "conversation"]
    assert words == [  # current_node's branch, parts as objects (trap 2), no children (trap 1)
        ("user", "How do I undo a release?"),
        ("assistant", "Redeploy the old tag: `git checkout v1.4 && make deploy`."),  # citation marker gone
        ("user", "And the database migrations?"),
        ("assistant", "Run the down migrations of v1.5 first."),
    ]
    null_time = next(m for m in c1 if m["content"] == "And the database migrations?")
    assert "time-derived" in null_time["metadata"]["tags"]
    assert null_time["timestamp"] == round((1772443200.25 + 9) * 1000)  # its parent's time
    assert c1[0]["metadata"]["tags"] == ["injected"]  # the user's custom instructions
    assert {tuple(m["metadata"]["tags"]) for m in c1 if m["metadata"].get("tool_call_id") == "web.run"} == {
        ("tool-call",), ("tool-result",)}
    alternates = sessions["chatgpt:68c1a0f2-1111-8000-9000-00000000c001#alternates"]
    assert [m["content"] for m in alternates] == ["First try: git revert the merge."]
    assert alternates[0]["metadata"]["tags"] == ["alternate"]
    c2 = sessions["chatgpt:68c1a0f2-1111-8000-9000-00000000c002"]
    assert [m["content"] for m in c2] == ["Pack for two days?", "Two shirts, a charger."]
    assert r.skipped["system message (hidden in ChatGPT)"] == 1
    assert r.skipped["image (not imported)"] == 1


def test_chatgpt_zip_with_shards(store: MemoryStore) -> None:
    reports, problems = do_import(store, FIX / "chatgpt" / "chatgpt-export-2026-03-05.zip")
    assert sorted(reports) == ["chatgpt-export-2026-03-05.zip:conversations-000.json",
                               "chatgpt-export-2026-03-05.zip:conversations-001.json"]
    assert sum(r.imported for r in reports.values()) == 4
    assert all("index" not in p and "manifest" not in p and "users.json" not in p for p, _ in problems)


# -- Claude.ai --------------------------------------------------------------------------------------
def test_claude_ai_sender_edits_and_blank_text(store: MemoryStore) -> None:
    reports, _ = do_import(store, FIX / "claude-ai" / "conversations.json")
    r = reports["conversations.json"]
    assert r.skipped["conversation without messages"] == 1  # trap 3: an empty envelope
    sessions = by_session(store)
    c = sessions["claude-ai:c0ffee00-0000-4000-8000-000000000001"]
    words = [(m["role"], m["content"]) for m in c if m["metadata"]["memory_kind"] == "conversation"]
    assert words == [  # `sender`, not `role` (trap 1); the newest branch (trap 2)
        ("user", "Pack for two days?"),
        ("assistant", "Two shirts, a charger."),  # from content[], not the blank text (trap 3)
        ("user", "And for a rainy week?"),
        ("assistant", "Add a rain jacket and waterproof shoes."),
    ]
    assert {tuple(m["metadata"]["tags"]) for m in c if m["metadata"].get("tool_call_id") == "toolu_w1"} == {
        ("tool-call",), ("tool-result",)}
    assert any(m["content"].startswith("[attachment list.txt]") for m in c)
    alt = sessions["claude-ai:c0ffee00-0000-4000-8000-000000000001#alternates"]
    assert [m["content"] for m in alt] == ["And for a week?", "Seven shirts."]
    old = sessions["claude-ai:c0ffee00-0000-4000-8000-000000000003"]
    assert [m["role"] for m in old] == ["user", "assistant"]
    # the .zip holds the same conversation: all present
    reports, _ = do_import(store, next((FIX / "claude-ai").glob("*.zip")))
    (z,) = reports.values()
    assert (z.imported, z.present) == (0, 9)


# -- Gemini CLI -------------------------------------------------------------------------------------
def test_gemini_upserts_rewinds_and_json_twin(store: MemoryStore) -> None:
    reports, _ = do_import(store, FIX / "gemini")
    sessions = by_session(store)
    g = sessions["gemini:7a1e0c52-0000-4000-8000-000000000001"]
    words = [(m["role"], m["content"]) for m in g if m["metadata"]["memory_kind"] == "conversation"]
    assert words == [("user", "Where is the log level set? @src/log.ts"),  # displayContent
                     ("assistant", "In log.ts, line 3."),  # one message, not two (trap 1)
                     ("user", "Make it warn instead."), ("assistant", "Changed LOG_LEVEL to 'warn'.")]
    assert g[0]["metadata"]["tags"] == ["injected"] and g[0]["content"].startswith("<session_context>")  # trap 3
    assert sum("tool-call" in m["metadata"]["tags"] for m in g) == 1
    assert sum("tool-result" in m["metadata"]["tags"] for m in g) == 1
    assert [m["content"] for m in sessions["gemini:7a1e0c52-0000-4000-8000-000000000001#alternates"]] == [
        "Make it debug.", "Changed LOG_LEVEL to 'debug'."]
    jsonl = reports["session-2026-03-02T11-00-7a1e0c52.jsonl"]
    assert jsonl.skipped["$set.messages (history rewrite, deletes nothing)"] == 1  # trap 2
    assert jsonl.skipped["rewind to an id never stored (nothing dropped)"] == 1
    # trap 4: the .json twin of the same session: its messages are present, not doubled
    assert jsonl.present == 2 and reports["session-2026-03-02T11-00-7a1e0c52.json"].imported == 2
    child = sessions["gemini:7a1e0c52-0000-4000-8000-0000000000c2"]
    assert [m["metadata"]["tags"] for m in child] == [["subagent"], ["subagent"]]


# -- convmem JSON Lines -----------------------------------------------------------------------------
def test_convmem_jsonl_times_and_reimport(store: MemoryStore) -> None:
    data = (FIX / "convmem" / "mixed-times.jsonl").read_bytes().splitlines(keepends=True)
    first = import_jsonl(store, data)
    assert (first.imported, first.rejected_count) == (6, 0)
    ts = {m["content"]: m["timestamp"] for m in messages(store)}
    assert ts["ISO time"] == 1772452800250
    assert ts["seconds"] == 1772452800000
    assert ts["float seconds"] == 1772452801500
    assert ts["milliseconds"] == 1772452802000
    assert ts["offset time"] == 1772452803000
    again = import_jsonl(store, data + [b'{"session_id": "notes", "role": "user", "content": "new"}\n'])
    assert (again.imported, again.present, again.rejected_count) == (1, 6, 0)
    assert again.lines()[0] == "imported 1 message, rejected 0 lines, 6 already present"


def test_convmem_jsonl_conflicts_counted_first_shown(store: MemoryStore) -> None:
    from convmem.importers import jsonl

    lines = [f'{{"session_id":"s","role":"user","content":"v{i}","message_id":"01HZY3M{i:019d}"}}\n'.encode()
             for i in range(30)]
    assert import_jsonl(store, lines).imported == 30
    changed = [line.replace(b'"v', b'"w') for line in lines]
    summary = import_jsonl(store, changed + lines)
    assert (summary.imported, summary.present, summary.rejected_count) == (0, 30, 30)
    out = summary.lines()
    assert out[0] == "imported 0 messages, rejected 30 lines, 30 already present"
    assert len(out) == 1 + jsonl.SHOWN_REJECTIONS + 1 and out[-1] == "... and 10 more rejected lines"
    assert all("CONFLICT" in line for line in out[1:-1])


# -- idempotence, growth, round trips ---------------------------------------------------------------
def test_folder_twice_then_a_grown_file(tmp_path: Path, store: MemoryStore) -> None:
    folder = tmp_path / "projects"
    shutil.copytree(CC_PROJECT, folder / CC_PROJECT.name)
    first, _ = do_import(store, folder)
    total = sum(r.imported for r in first.values())
    assert total == 21 and len(messages(store)) == 21
    second, _ = do_import(store, folder)
    assert sum(r.imported for r in second.values()) == 0
    assert sum(r.present for r in second.values()) == 23  # 21 + the resumed copy's 2 again
    grown = folder / CC_PROJECT.name / "9e81f0aa-1c2b-4d3e-8f90-a1b2c3d4e502.jsonl"
    with grown.open("a") as f:
        f.write('{"type":"user","uuid":"2b000000-0000-4000-8000-000000000003","parentUuid":null,'
                '"sessionId":"9e81f0aa-1c2b-4d3e-8f90-a1b2c3d4e502","timestamp":"2026-03-02T09:10:00.000Z",'
                '"message":{"role":"user","content":"One more line."}}\n')
    third, _ = do_import(store, grown)
    (r,) = third.values()
    assert (r.imported, r.present) == (1, 4)
    assert len(messages(store)) == 22


ALL = ["claude", "codex", "chatgpt", "claude-ai", "gemini"]


@pytest.mark.parametrize("name", ALL)
def test_import_export_import_round_trip(tmp_path: Path, name: str) -> None:
    with MemoryStore.open(tmp_path / "a") as a:
        do_import(a, FIX / name)
        exported = messages(a)
        assert exported
        again = import_jsonl(a, [__import__("orjson").dumps(m) + b"\n" for m in exported])
        assert (again.imported, again.present) == (0, len(exported))  # into the same store
    with MemoryStore.open(tmp_path / "b") as b:
        s = import_jsonl(b, [__import__("orjson").dumps(m) + b"\n" for m in exported])
        assert (s.imported, s.rejected_count) == (len(exported), 0)
        assert messages(b) == exported
        reports, _ = do_import(b, FIX / name)  # and the source again: nothing new
        assert sum(r.imported + r.updated + r.rejected for r in reports.values()) == 0


def test_every_message_has_a_unique_readable_session() -> None:
    for name in ALL:
        prefixes = {"claude": "claude-code:", "codex": "codex:", "chatgpt": "chatgpt:",
                    "claude-ai": "claude-ai:", "gemini": "gemini:"}
        import tempfile

        with tempfile.TemporaryDirectory() as d, MemoryStore.open(Path(d)) as s:
            do_import(s, FIX / name)
            ids = [m["message_id"] for m in messages(s)]
            assert len(ids) == len(set(ids))
            assert all(m["session_id"].startswith(prefixes[name]) for m in messages(s))
            assert Counter(m["role"] for m in messages(s))["user"] > 0
