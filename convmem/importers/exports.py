"""The two web exports: ChatGPT (`conversations.json` or its `conversations-NNN.json` shards, in
the .zip or not) and Claude.ai (`conversations.json`, in the .zip or not).

Both are JSON arrays of conversations, read one conversation at a time (ijson), so memory is
bounded by the largest conversation, not the file. Each conversation is a tree: the branch the
user last saw becomes the session `<source>:<id>`; the other branches (regenerations, edits) go
to `<source>:<id>#alternates`, tagged `alternate`. Children are always derived from the parent
links (2026 ChatGPT files have no `children`).
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from typing import IO, Any

from .common import (ALTERNATES_SUFFIX, DROPPED_INJECTED, DROPPED_TOOLS, EMPTY, KIND_OTHER,
                     REASONING, TAG_ALTERNATE, TAG_INJECTED, TAG_REASONING, TAG_TIME_DERIVED,
                     TAG_TOOL_CALL, TAG_TOOL_ERROR, TAG_TOOL_RESULT, FileReport, Options,
                     any_time_ms, iso_ms, json_text, make_item)

CLAUDE_ROOT = "00000000-0000-4000-8000-000000000000"
_CITATION = re.compile("\ue200[^\ue201]*\ue201")  # ChatGPT's inline citation markers


def iter_array(stream: IO[bytes], report: FileReport) -> Iterator[Any]:
    """The elements of a top-level JSON array (or the one object of a file that is not one)."""
    import ijson

    head = stream.read(1)
    while head in (b" ", b"\n", b"\r", b"\t", b"\xef", b"\xbb", b"\xbf"):
        head = stream.read(1)
    prefix = "item" if head == b"[" else ""
    import io as _io

    class _Rejoined(_io.RawIOBase):
        def __init__(self) -> None:
            self.first = head

        def readable(self) -> bool:
            return True

        def readinto(self, buf: Any) -> int:
            if self.first:
                n = len(self.first)
                buf[:n] = self.first
                self.first = b""
                return n
            data = stream.read(len(buf))
            buf[: len(data)] = data
            return len(data)

    yield from ijson.items(_io.BufferedReader(_Rejoined(), 1 << 20), prefix, use_float=True)


# -- ChatGPT ----------------------------------------------------------------------------------
def _chatgpt_text(content: Any, report: FileReport) -> tuple[str, str]:
    """(text, content_type) of a message's content; image pointers are counted, not imported."""
    if type(content) is not dict:
        return "", ""
    ctype = str(content.get("content_type") or "")
    parts = content.get("parts")
    texts: list[str] = []
    if type(parts) is list:
        for p in parts:
            if type(p) is str:
                texts.append(p)
            elif type(p) is dict:
                pt = p.get("content_type") or p.get("type")
                if type(p.get("text")) is str and pt in (None, "text", "input_text", "output_text"):
                    texts.append(p["text"])
                elif pt and "image" in str(pt) or "asset_pointer" in p:
                    report.skip("image (not imported)")
                elif pt == "audio_transcription" and type(p.get("text")) is str:
                    texts.append(p["text"])
                else:
                    report.skip(f"content part {str(pt):.40} (not imported)")
    for name in ("text", "result", "summary", "content"):
        if not texts and type(content.get(name)) is str:
            texts.append(content[name])
    if not texts and ctype == "thoughts" and type(content.get("thoughts")) is list:
        texts = [str(t.get("content", "")) for t in content["thoughts"] if type(t) is dict]
    return _CITATION.sub("", "\n".join(t for t in texts if t)), ctype


def chatgpt_conversations(stream: IO[bytes], report: FileReport, opt: Options,
                          links: dict[str, Any], out_fn: Any) -> None:
    for conv in iter_array(stream, report):
        report.records += 1
        if type(conv) is not dict:
            report.skip("not a JSON object")
            continue
        mapping = conv.get("mapping")
        cid = conv.get("id") or conv.get("conversation_id")
        if type(mapping) is not dict or not cid:
            report.skip("conversation without mapping or id")
            continue
        out: list[dict[str, Any]] = []
        _chatgpt_one(conv, str(cid), mapping, report, opt, out)
        out_fn(out)


def _chatgpt_one(conv: dict[str, Any], cid: str, mapping: dict[str, Any], report: FileReport,
                 opt: Options, out: list[dict[str, Any]]) -> None:
    session = f"chatgpt:{cid}"
    conv_ts = any_time_ms(conv.get("create_time")) or any_time_ms(conv.get("update_time")) or 0
    nodes = {k: v for k, v in mapping.items() if type(v) is dict}
    main: list[str] = []
    leaf = conv.get("current_node")
    if leaf not in nodes:  # no pointer: the newest leaf
        parents = {v.get("parent") for v in nodes.values()}
        leaves = [k for k in nodes if k not in parents]
        leaf = max(leaves, key=lambda k: _node_time(nodes[k]) or 0, default=None)
    seen: set[str] = set()
    while leaf in nodes and leaf not in seen:
        seen.add(leaf)
        main.append(leaf)
        leaf = nodes[leaf].get("parent")
    main.reverse()
    on_main = set(main)
    others = sorted((k for k in nodes if k not in on_main),
                    key=lambda k: (_node_time(nodes[k]) or 0, k))
    last = conv_ts
    for alt, order in ((False, main), (True, others)):
        for nid in order:
            msg = nodes[nid].get("message")
            if type(msg) is not dict:
                continue  # the root and other empty nodes hold no message
            ts = _node_time(nodes[nid])
            derived = ts is None
            ts = last if ts is None else ts
            if not alt:
                last = ts
            sess = session + ALTERNATES_SUFFIX if alt else session
            _chatgpt_message(msg, nid, cid, sess, ts, derived, alt, report, opt, out)


def _node_time(node: dict[str, Any]) -> int | None:
    msg = node.get("message")
    return any_time_ms(msg.get("create_time")) if type(msg) is dict else None


def _chatgpt_message(msg: dict[str, Any], nid: str, cid: str, session: str, ts: int,
                     derived: bool, alt: bool, report: FileReport, opt: Options,
                     out: list[dict[str, Any]]) -> None:
    author = msg.get("author") if type(msg.get("author")) is dict else {}
    role = author.get("role")
    meta = msg.get("metadata") if type(msg.get("metadata")) is dict else {}
    text, ctype = _chatgpt_text(msg.get("content"), report)
    key = ("chatgpt", cid, nid)
    tags = ([TAG_ALTERNATE] if alt else []) + ([TAG_TIME_DERIVED] if derived else [])
    hidden = msg.get("weight") == 0 or meta.get("is_visually_hidden_from_conversation")
    if ctype in ("thoughts", "reasoning_recap") or msg.get("channel") == "analysis":
        if not opt.reasoning:
            report.skip(REASONING)
            return
        item = make_item(session, "assistant", text, ts, key, report, kind=KIND_OTHER,
                         tags=tags + [TAG_REASONING])
    elif role == "system" or ctype == "user_editable_context":
        if not (meta.get("is_user_system_message") or ctype == "user_editable_context"):
            report.skip("system message (hidden in ChatGPT)")
            return
        if opt.drop_injected:
            report.skip(DROPPED_INJECTED)
            return
        if ctype == "user_editable_context":
            content = msg.get("content") or {}
            text = "\n".join(str(content.get(k)) for k in ("user_profile", "user_instructions")
                             if content.get(k))
        item = make_item(session, "system", text, ts, key, report, kind=KIND_OTHER,
                         tags=tags + [TAG_INJECTED])
    elif hidden:
        report.skip("hidden in ChatGPT")
        return
    elif role == "tool":
        if opt.drop_tools:
            report.skip(DROPPED_TOOLS)
            return
        item = make_item(session, "system", text, ts, key, report, kind=KIND_OTHER,
                         tags=tags + [TAG_TOOL_RESULT], tool_call_id=str(author.get("name") or ""),
                         limit=opt.tool_output_max)
    elif role == "assistant" and msg.get("recipient") not in (None, "all"):
        if opt.drop_tools:
            report.skip(DROPPED_TOOLS)
            return
        item = make_item(session, "assistant", f"{msg.get('recipient')}: {text}", ts, key, report,
                         kind=KIND_OTHER, tags=tags + [TAG_TOOL_CALL],
                         tool_call_id=str(msg.get("recipient")), limit=opt.tool_output_max)
    elif role in ("user", "assistant"):
        item = make_item(session, role, text, ts, key, report, tags=tags or None,
                         kind=KIND_OTHER if alt else None)
    else:
        report.unknown(f"author role {role}")
        return
    if item is not None:
        out.append(item)


# -- Claude.ai --------------------------------------------------------------------------------
def claude_ai_conversations(stream: IO[bytes], report: FileReport, opt: Options,
                            links: dict[str, Any], out_fn: Any) -> None:
    for conv in iter_array(stream, report):
        report.records += 1
        if type(conv) is not dict or not conv.get("uuid"):
            report.skip("conversation without uuid")
            continue
        msgs = conv.get("chat_messages")
        if msgs is None:
            msgs = conv.get("messages")
        if type(msgs) is not list or not msgs:
            report.skip("conversation without messages")
            continue
        out: list[dict[str, Any]] = []
        _claude_ai_one(conv, [m for m in msgs if type(m) is dict and m.get("uuid")], report,
                       opt, out)
        out_fn(out)


def _claude_ai_one(conv: dict[str, Any], msgs: list[dict[str, Any]], report: FileReport,
                   opt: Options, out: list[dict[str, Any]]) -> None:
    cid = str(conv["uuid"])
    session = f"claude-ai:{cid}"
    by_id = {m["uuid"]: m for m in msgs}
    has_tree = any("parent_message_uuid" in m for m in msgs)
    if has_tree:
        parents = {m.get("parent_message_uuid") for m in msgs}
        leaves = [m for m in msgs if m["uuid"] not in parents]
        # No pointer to the branch last shown: the newest leaf is taken as it (then file order).
        leaf = max(enumerate(leaves), key=lambda t: (iso_ms(t[1].get("created_at")) or 0, t[0]),
                   default=(0, None))[1]
        main: list[str] = []
        seen: set[str] = set()
        while leaf is not None and leaf["uuid"] not in seen:
            seen.add(leaf["uuid"])
            main.append(leaf["uuid"])
            leaf = by_id.get(leaf.get("parent_message_uuid"))
        main.reverse()
    else:
        main = [m["uuid"] for m in msgs]
    on_main = set(main)
    others = [m["uuid"] for m in msgs if m["uuid"] not in on_main]
    last = iso_ms(conv.get("created_at")) or 0
    for alt, order in ((False, main), (True, others)):
        for mid in order:
            m = by_id[mid]
            ts = iso_ms(m.get("created_at"))
            derived = ts is None
            ts = last if ts is None else ts
            if not alt:
                last = ts
            _claude_ai_message(m, cid, session + ALTERNATES_SUFFIX if alt else session, ts,
                               derived, alt, report, opt, out)


def _claude_ai_message(m: dict[str, Any], cid: str, session: str, ts: int, derived: bool,
                       alt: bool, report: FileReport, opt: Options,
                       out: list[dict[str, Any]]) -> None:
    sender = m.get("sender", m.get("role"))
    role = {"human": "user", "user": "user", "assistant": "assistant"}.get(sender)
    if role is None:
        report.unknown(f"sender {sender}")
        return
    base = ([TAG_ALTERNATE] if alt else []) + ([TAG_TIME_DERIVED] if derived else [])
    mid = str(m["uuid"])
    texts: list[str] = []
    blocks = m.get("content") if type(m.get("content")) is list else []
    for i, b in enumerate(blocks):
        if type(b) is not dict:
            continue
        bt = b.get("type")
        bts = iso_ms(b.get("start_timestamp")) or ts
        if bt == "text":
            if type(b.get("text")) is str and b["text"].strip():
                texts.append(b["text"])
        elif bt in ("thinking", "redacted_thinking"):
            if not opt.reasoning:
                report.skip(REASONING)
                continue
            _add(out, make_item(session, "assistant", str(b.get("thinking") or ""), bts,
                                ("claude-ai", cid, mid, str(i)), report, kind=KIND_OTHER,
                                tags=base + [TAG_REASONING], id_ts=ts))
        elif bt == "tool_use":
            if opt.drop_tools:
                report.skip(DROPPED_TOOLS)
                continue
            tid = str(b.get("id") or f"{mid}:{i}")
            _add(out, make_item(session, "assistant",
                                f"{b.get('name') or 'tool'}: {json_text(b.get('input'))}", bts,
                                ("claude-ai", cid, mid, str(i)), report, kind=KIND_OTHER,
                                tags=base + [TAG_TOOL_CALL], tool_call_id=tid,
                                limit=opt.tool_output_max, id_ts=ts))
        elif bt == "tool_result":
            if opt.drop_tools:
                report.skip(DROPPED_TOOLS)
                continue
            body = b.get("content")
            if type(body) is list:
                body = "\n".join(str(p.get("text") or p.get("title") or "") for p in body
                                 if type(p) is dict)
            tags = base + [TAG_TOOL_RESULT] + ([TAG_TOOL_ERROR] if b.get("is_error") else [])
            _add(out, make_item(session, "system", json_text(body or ""), bts,
                                ("claude-ai", cid, mid, str(i)), report, kind=KIND_OTHER,
                                tags=tags, tool_call_id=str(b.get("tool_use_id") or ""),
                                limit=opt.tool_output_max, id_ts=ts))
        else:
            report.unknown(f"content block {bt}")
    text = "\n\n".join(texts)
    if not text.strip() and type(m.get("text")) is str:
        text = m["text"]  # older exports: only the flattened text
    if not text.strip():
        report.skip(EMPTY)
    else:
        _add(out, make_item(session, role, text, ts, ("claude-ai", cid, mid), report,
                            tags=base or None, kind=KIND_OTHER if alt else None))
    for j, a in enumerate(m.get("attachments") or []):
        if type(a) is dict and a.get("extracted_content"):
            if opt.drop_injected:
                report.skip(DROPPED_INJECTED)
                continue
            _add(out, make_item(session, "user",
                                f"[attachment {a.get('file_name') or ''}]\n{a['extracted_content']}",
                                ts, ("claude-ai", cid, mid, f"attachment{j}"), report,
                                kind=KIND_OTHER, tags=base + ["attachment"],
                                limit=opt.tool_output_max))


def _add(out: list[dict[str, Any]], item: dict[str, Any] | None) -> None:
    if item is not None:
        out.append(item)
