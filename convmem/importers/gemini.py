"""Gemini CLI chat recordings (~/.gemini/tmp/<project>/chats/session-*.jsonl, older *.json).

The JSON Lines form is a log of upserts: a record with an `id` already seen replaces it in place,
`{"$rewindTo": id}` drops that message and all after it, `{"$set": {...}}` changes metadata. A
session is folded in memory as the CLI's own loader does (one session is one conversation), then
imported. Unlike the CLI, `$set.messages` (the model's history rewritten at each compression)
deletes nothing, and messages dropped by a rewind are kept in `gemini:<id>#alternates`.
"""
from __future__ import annotations

from typing import IO, Any

import orjson

from .common import (ALTERNATES_SUFFIX, DROPPED_INJECTED, DROPPED_TOOLS, KIND_OTHER, REASONING,
                     TAG_ALTERNATE, TAG_INJECTED, TAG_REASONING, TAG_SUBAGENT, TAG_TOOL_CALL,
                     TAG_TOOL_ERROR, TAG_TOOL_RESULT, FileReport, Options, iso_ms, json_problem,
                     json_text, make_item)
from .sources import read_lines

SOURCE = "gemini"
_NOTES = ("info", "warning", "error")


def gemini_file(stream: IO[bytes], report: FileReport, opt: Options, path: str,
                out_fn: Any) -> None:
    # The JSON Lines form is read a line at a time (its memory is the session's live messages,
    # not the file: upserts rewrite messages many times); the older single JSON document is one
    # value, read whole. The first line tells them apart: a whole document is one line only if
    # it is the whole file.
    first = stream.readline()
    while first.strip() == b"" and first:
        first = stream.readline()
    second = stream.readline() if first else b""
    while second.strip() == b"" and second:
        second = stream.readline()
    single = first.lstrip().startswith(b"{") and not second.lstrip().startswith(b"{")
    if single:
        rest = first + second + stream.read()
    header: dict[str, Any] = {}
    order: dict[str, dict[str, Any]] = {}  # id -> the latest version (first time kept)
    rewound: list[dict[str, Any]] = []
    if single:
        # The older single JSON document: metadata plus messages[].
        try:
            doc = orjson.loads(rest)
        except orjson.JSONDecodeError as exc:
            report.error = json_problem(rest, exc, record=False)
            return
        report.records += 1
        if type(doc) is not dict:
            report.skip("not a JSON object")
            return
        header = doc
        for m in doc.get("messages") or []:
            _upsert(order, m, report)
    else:
        import itertools

        lines = itertools.chain(((line.rstrip(b"\n"), 0) for line in (first, second) if line),
                                read_lines(stream, lambda: report.skip("record too large")))
        for raw, _ in lines:
            if not raw.strip():
                continue
            report.records += 1
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError:
                report.skip("invalid JSON")
                continue
            if type(obj) is not dict:
                report.skip("not a JSON object")
            elif "$rewindTo" in obj:
                target = obj["$rewindTo"]
                ids = list(order)
                if target in order:
                    cut_at = ids.index(target)
                    for k in ids[cut_at:]:
                        rewound.append(order.pop(k))
                else:
                    report.skip("rewind to an id never stored (nothing dropped)")
            elif "$set" in obj:
                if type(obj["$set"]) is dict and "messages" in obj["$set"]:
                    report.skip("$set.messages (history rewrite, deletes nothing)")
                else:
                    report.skip("not conversation ($set metadata)")
            elif "sessionId" in obj and "id" not in obj:
                header.update(obj)
                report.skip("not conversation (session header)")
            else:
                _upsert(order, obj, report)
    sid = header.get("sessionId")
    if not sid:
        report.error = "no sessionId in the recording"
        return
    session = f"{SOURCE}:{sid}"
    child = header.get("kind") == "subagent" or _is_child(path)
    out: list[dict[str, Any]] = []
    first_user = True
    for m in order.values():
        first_user = _message(m, session, sid, False, child, first_user, report, opt, out)
    for m in rewound:
        _message(m, session + ALTERNATES_SUFFIX, sid, True, child, False, report, opt, out)
    out_fn(out)


def _is_child(path: str) -> bool:
    parts = path.replace("\\", "/").split("/")
    return len(parts) >= 3 and parts[-3] == "chats"


def _upsert(order: dict[str, dict[str, Any]], m: Any, report: FileReport) -> None:
    if type(m) is not dict or not m.get("id"):
        report.skip("message without id")
        return
    mid = str(m["id"])
    earlier = order.get(mid)
    if earlier is not None:
        report.skip("earlier version of an upserted message")
        m = dict(m)
        m["_first_ts"] = earlier.get("_first_ts", earlier.get("timestamp"))
        order[mid] = m  # in place: a dict keeps the first insertion's position
    else:
        order[mid] = m


def _parts_text(content: Any, want_thought: bool = False) -> str:
    if type(content) is str:
        return "" if want_thought else content
    out = []
    if type(content) is list:
        for p in content:
            if type(p) is dict and type(p.get("text")) is str and bool(p.get("thought")) == want_thought:
                out.append(p["text"])
    return "\n".join(out)


def _message(m: dict[str, Any], session: str, sid: str, alt: bool, child: bool, first_user: bool,
             report: FileReport, opt: Options, out: list[dict[str, Any]]) -> bool:
    mtype = m.get("type")
    ts = iso_ms(m.get("_first_ts") or m.get("timestamp")) or 0
    mid = str(m["id"])
    base = ([TAG_ALTERNATE] if alt else []) + ([TAG_SUBAGENT] if child else [])
    kind = KIND_OTHER if alt else None
    if mtype == "user":
        display = m.get("displayContent")
        text = _parts_text(display) if display else _parts_text(m.get("content"))
        if first_user and text.lstrip().startswith("<session_context>"):
            if opt.drop_injected:
                report.skip(DROPPED_INJECTED)
            else:
                _add(out, make_item(session, "system", text, ts, (SOURCE, sid, mid), report,
                                    kind=KIND_OTHER, tags=base + [TAG_INJECTED]))
            return first_user
        _add(out, make_item(session, "user", text, ts, (SOURCE, sid, mid), report,
                            tags=base or None, kind=kind))
        return False
    if mtype == "gemini":
        thoughts = m.get("thoughts")
        thought_text = _parts_text(m.get("content"), want_thought=True)
        if type(thoughts) is list and thoughts:
            thought_text = "\n".join(f"{t.get('subject', '')}: {t.get('description', '')}"
                                     for t in thoughts if type(t) is dict) + thought_text
        if thought_text.strip():
            if opt.reasoning:
                _add(out, make_item(session, "assistant", thought_text, ts,
                                    (SOURCE, sid, mid, "thoughts"), report, kind=KIND_OTHER,
                                    tags=base + [TAG_REASONING]))
            else:
                report.skip(REASONING)
        for i, tc in enumerate(m.get("toolCalls") or []):
            if type(tc) is not dict:
                continue
            if opt.drop_tools:
                report.skip(DROPPED_TOOLS)
                continue
            tid = str(tc.get("id") or f"{mid}:{i}")
            _add(out, make_item(session, "assistant", f"{tc.get('name') or 'tool'}: "
                                f"{json_text(tc.get('args'))}", ts, (SOURCE, sid, "tool", tid),
                                report, kind=KIND_OTHER, tags=base + [TAG_TOOL_CALL],
                                tool_call_id=tid, limit=opt.tool_output_max))
            if tc.get("result") is not None:
                res = tc["result"]
                text = _result_text(res)
                tags = base + [TAG_TOOL_RESULT] + ([TAG_TOOL_ERROR] if tc.get("status") == "error" else [])
                _add(out, make_item(session, "system", text, ts, (SOURCE, sid, "result", tid),
                                    report, kind=KIND_OTHER, tags=tags, tool_call_id=tid,
                                    limit=opt.tool_output_max))
        text = _parts_text(m.get("content"))
        if text.strip():
            _add(out, make_item(session, "assistant", text, ts, (SOURCE, sid, mid), report,
                                tags=base or None, kind=kind))
        elif not m.get("toolCalls"):
            report.skip("empty")
        return first_user
    if mtype in _NOTES:
        report.skip(f"CLI note ({mtype})")
        return first_user
    report.unknown(str(mtype))
    return first_user


def _result_text(res: Any) -> str:
    if type(res) is list:
        out = []
        for p in res:
            if type(p) is dict and type(p.get("text")) is str:
                out.append(p["text"])
            elif type(p) is dict and type(p.get("functionResponse")) is dict:
                resp = p["functionResponse"].get("response")
                out.append(json_text(resp.get("output", resp) if type(resp) is dict else resp))
        return "\n".join(out)
    return json_text(res)


def _add(out: list[dict[str, Any]], item: dict[str, Any] | None) -> None:
    if item is not None:
        out.append(item)
