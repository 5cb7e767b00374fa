"""OpenAI Codex CLI rollouts (~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl and .jsonl.zst).

One thread per file, in line order; there are no message ids, so a message is keyed by its line
number in the file (stable while the file grows). Each turn is written twice (an `event_msg` and
a `response_item`): whichever comes first is imported, the twin is counted as a duplicate.
"""
from __future__ import annotations

import hashlib
import re
from typing import Any

from .common import (DROPPED_INJECTED, DROPPED_TOOLS, KIND_OTHER, KIND_SUMMARY, REASONING,
                     TAG_COMPACT, TAG_INJECTED, TAG_REASONING, TAG_TOOL_CALL, TAG_TOOL_RESULT,
                     FileReport, Options, iso_ms, json_text, make_item)

SOURCE = "codex"
_INJECTED_WRAPPERS = ("environment_context", "user_instructions", "skill", "user_shell_command",
                      "turn_aborted", "permissions", "collaboration_mode", "subagent_notification")
_WRAPPED = re.compile(r"\A\s*<(%s)\b[^>]*>.*</\1>\s*\Z" % "|".join(_INJECTED_WRAPPERS), re.S)
_INJECTED_PREFIXES = ("# AGENTS.md instructions", "<INSTRUCTIONS>")
_TOOL_CALLS = ("function_call", "custom_tool_call", "local_shell_call", "web_search_call",
               "tool_search_call", "image_generation_call")
_TOOL_OUTPUTS = ("function_call_output", "custom_tool_call_output", "local_shell_call_output",
                 "tool_search_output", "mcp_tool_call_output")
_QUIET_EVENTS = frozenset({"token_count", "task_started", "task_complete", "turn_aborted",
                           "exec_command_begin", "exec_command_end", "exec_command_output_delta",
                           "patch_apply_begin", "patch_apply_end", "mcp_tool_call_begin",
                           "mcp_tool_call_end", "turn_diff", "session_configured",
                           "background_event", "stream_error", "error", "web_search_begin",
                           "web_search_end", "plan_update", "context_compacted",
                           "entered_review_mode", "exited_review_mode", "thread_rolled_back",
                           "user_message_delta", "agent_message_delta", "view_image_tool_call",
                           "get_history_entry_response", "list_custom_prompts_response"})
_FORK_WINDOW_MS = 1000
_RECENT = 32


def is_injected(text: str) -> bool:
    """A whole part made of one host wrapper (text the user typed may start with `<plugin>`)."""
    return text.startswith(_INJECTED_PREFIXES) or (
        text.lstrip()[:1] == "<" and _WRAPPED.match(text) is not None)


def _texts(content: Any) -> list[str]:
    if type(content) is str:
        return [content]
    out = []
    if type(content) is list:
        for part in content:
            if type(part) is dict and type(part.get("text")) is str:
                out.append(part["text"])
    return out


class CodexParser:
    def __init__(self, report: FileReport, options: Options, ctx: dict[str, Any],
                 links: dict[str, Any], path: str = "") -> None:
        self.report = report
        self.opt = options
        self.ctx = ctx
        self.session: str | None = ctx.get("session")
        self.fork_until: int = ctx.get("fork_until", 0)
        self.recent: list[str] = ctx.get("recent", [])
        self.last_ts: int = ctx.get("last_ts", 0)

    def finish(self, out: list[dict[str, Any]], keep_open: bool) -> None:
        self.ctx.update(session=self.session, fork_until=self.fork_until,
                        recent=self.recent[-_RECENT:], last_ts=self.last_ts)

    def _seen(self, role: str, text: str) -> bool:
        """Whether this message was just imported from its twin record (remembered if not)."""
        h = hashlib.blake2b(f"{role}\x1f{text.strip()}".encode("utf-8", "replace"),
                            digest_size=8).hexdigest()
        if h in self.recent:
            self.recent.remove(h)
            return True
        self.recent.append(h)
        if len(self.recent) > _RECENT:
            del self.recent[0]
        return False

    def feed(self, obj: Any, where: str, out: list[dict[str, Any]]) -> None:
        r = self.report
        if type(obj) is not dict:
            r.skip("not a JSON object")
            return
        ts = iso_ms(obj.get("timestamp"))
        if ts is None:
            ts = self.last_ts
        else:
            self.last_ts = ts
        kind = obj.get("type")
        payload = obj.get("payload")
        if "payload" not in obj and kind in ("message", "reasoning") + _TOOL_CALLS + _TOOL_OUTPUTS:
            kind, payload = "response_item", obj  # the first rollouts: bare response items
        if kind == "session_meta" and type(payload) is dict:
            if self.session is None and payload.get("id"):
                self.session = f"{SOURCE}:{payload['id']}"
                if payload.get("forked_from_id"):
                    # A fork starts with a copy of the parent's history, written at once:
                    # counted, not imported (it is in the parent's rollout).
                    self.fork_until = ts + _FORK_WINDOW_MS
            r.skip("not conversation (session_meta)")
            return
        if self.session is None:
            if obj.get("record_type") == "state" or kind == "session_meta":
                r.skip("not conversation (state)")
                return
            r.skip("before session_meta (no thread id)")
            return
        if self.fork_until and ts <= self.fork_until and kind in ("response_item", "event_msg"):
            r.skip("copied history of a forked thread")
            return
        if type(payload) is not dict:
            r.unknown(str(kind))
            return
        ptype = payload.get("type")
        key = (SOURCE, self.session, where)
        if kind == "event_msg":
            if ptype == "user_message":
                self._words("user", str(payload.get("message") or ""), ts, key, out)
            elif ptype == "agent_message":
                self._words("assistant", str(payload.get("message") or ""), ts, key, out)
            elif ptype in ("agent_reasoning", "agent_reasoning_raw_content"):
                self._reasoning(str(payload.get("text") or ""), ts, key, out, twin=True)
            elif ptype in _QUIET_EVENTS:
                r.skip(f"not conversation (event {ptype})")
            else:
                r.unknown(f"event_msg {ptype}")
        elif kind == "response_item":
            self._item(payload, ptype, ts, key, out)
        elif kind == "compacted":
            if payload.get("replacement_history") is not None:
                r.skip("replacement history of a compaction (not indexed)")
            text = str(payload.get("message") or "")
            if self.opt.drop_injected:
                r.skip(DROPPED_INJECTED)
            else:
                self._add(out, make_item(self.session, "system", text, ts, key, r,
                                         kind=KIND_SUMMARY, tags=[TAG_COMPACT, TAG_INJECTED]))
        elif kind == "turn_context":
            r.skip("not conversation (turn_context)")
        else:
            r.unknown(str(kind))

    @staticmethod
    def _add(out: list[dict[str, Any]], item: dict[str, Any] | None) -> None:
        if item is not None:
            out.append(item)

    def _words(self, role: str, text: str, ts: int, key: tuple[str, ...],
               out: list[dict[str, Any]]) -> None:
        if role == "user" and is_injected(text):
            self._injected(text, ts, key, out)
            return
        if not text.strip():
            self.report.skip("empty")
            return
        if self._seen(role, text):
            self.report.skip("duplicate (written twice by Codex)")
            return
        self._add(out, make_item(self.session, role, text, ts, key, self.report))

    def _injected(self, text: str, ts: int, key: tuple[str, ...], out: list[dict[str, Any]]) -> None:
        if self.opt.drop_injected:
            self.report.skip(DROPPED_INJECTED)
            return
        self._add(out, make_item(self.session, "system", text, ts, key, self.report,
                                 kind=KIND_OTHER, tags=[TAG_INJECTED]))

    def _reasoning(self, text: str, ts: int, key: tuple[str, ...], out: list[dict[str, Any]],
                   twin: bool = False) -> None:
        if not self.opt.reasoning or not text.strip():
            self.report.skip(REASONING)
            return
        if self._seen("reasoning", text):
            self.report.skip("duplicate (written twice by Codex)")
            return
        self._add(out, make_item(self.session, "assistant", text, ts, key, self.report,
                                 kind=KIND_OTHER, tags=[TAG_REASONING]))

    def _item(self, p: dict[str, Any], ptype: Any, ts: int, key: tuple[str, ...],
              out: list[dict[str, Any]]) -> None:
        r = self.report
        if ptype == "message":
            role = p.get("role")
            parts = _texts(p.get("content"))
            if role in ("developer", "system"):
                self._injected("\n".join(parts), ts, key, out)
            elif role == "user":
                typed = [t for t in parts if not is_injected(t)]
                injected = [t for t in parts if is_injected(t)]
                if injected:
                    self._injected("\n".join(injected), ts, key + ("injected",), out)
                if typed:
                    self._words("user", "\n".join(typed), ts, key, out)
            elif role == "assistant":
                self._words("assistant", "\n".join(parts), ts, key, out)
            else:
                r.unknown(f"message role {role}")
        elif ptype == "reasoning":
            summary = p.get("summary")
            self._reasoning("\n".join(_texts(summary)), ts, key, out)
        elif ptype in _TOOL_CALLS:
            if self.opt.drop_tools:
                r.skip(DROPPED_TOOLS)
                return
            name = p.get("name") or ptype
            args = p.get("arguments", p.get("input", p.get("action", "")))
            self._add(out, make_item(self.session, "assistant", f"{name}: {json_text(args)}", ts,
                                     key, r, kind=KIND_OTHER, tags=[TAG_TOOL_CALL],
                                     tool_call_id=str(p.get("call_id") or p.get("id") or ""),
                                     limit=self.opt.tool_output_max))
        elif ptype in _TOOL_OUTPUTS:
            if self.opt.drop_tools:
                r.skip(DROPPED_TOOLS)
                return
            output = p.get("output")
            if type(output) is dict:
                output = output.get("content", output)
            text = "\n".join(_texts(output)) if type(output) is list else json_text(output or "")
            self._add(out, make_item(self.session, "system", text, ts, key, r, kind=KIND_OTHER,
                                     tags=[TAG_TOOL_RESULT],
                                     tool_call_id=str(p.get("call_id") or ""),
                                     limit=self.opt.tool_output_max))
        else:
            r.unknown(f"response_item {ptype}")
