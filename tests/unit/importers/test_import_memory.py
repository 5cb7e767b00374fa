"""An export is read one conversation at a time: the parser's memory does not grow with the
file (a 1 GB ChatGPT or Claude.ai export imports in bounded memory). Measured with tracemalloc on
generated exports of two sizes, the messages handed on being dropped as they come."""
from __future__ import annotations

import io
import json
import tracemalloc

from convmem.importers.common import FileReport, Options
from convmem.importers.exports import chatgpt_conversations, claude_ai_conversations


def chatgpt_export(conversations: int) -> bytes:
    convs = []
    for c in range(conversations):
        mapping, parent = {}, None
        for i in range(20):
            nid = f"n{c}-{i}"
            mapping[nid] = {"id": nid, "parent": parent, "children": [],
                            "message": {"id": nid, "author": {"role": "user" if i % 2 == 0 else "assistant"},
                                        "create_time": 1.7e9 + i,
                                        "content": {"content_type": "text", "parts": [f"text {c} {i} " * 40]}}}
            parent = nid
        convs.append({"id": f"c{c}", "title": "t", "create_time": 1.7e9, "mapping": mapping,
                      "current_node": parent})
    return json.dumps(convs).encode()


def claude_ai_export(conversations: int) -> bytes:
    return json.dumps([{"uuid": f"u{c}", "name": "t", "created_at": "2026-01-01T00:00:00Z",
                        "chat_messages": [{"uuid": f"m{c}-{i}", "sender": "human" if i % 2 == 0 else "assistant",
                                           "text": f"text {c} {i} " * 40,
                                           "created_at": "2026-01-01T00:00:00Z"} for i in range(20)]}
                       for c in range(conversations)]).encode()


def peak_while_parsing(parse, data: bytes) -> tuple[int, int]:
    seen = [0]

    def drop(items):
        seen[0] += len(items)

    stream = io.BytesIO(data)
    tracemalloc.start()
    try:
        parse(stream, FileReport("x"), Options(), {}, drop)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, seen[0]


def test_export_parsers_memory_does_not_grow_with_the_file():
    for parse, make in ((chatgpt_conversations, chatgpt_export), (claude_ai_conversations, claude_ai_export)):
        small, big = make(50), make(800)  # ~1 MB and ~15 MB
        assert len(big) > 14 * len(small)
        small_peak, small_n = peak_while_parsing(parse, small)
        big_peak, big_n = peak_while_parsing(parse, big)
        assert big_n == 16 * small_n > 0  # every message came through
        assert big_peak < 2 * small_peak + (1 << 20), (parse.__name__, small_peak, big_peak)
        assert big_peak < 8 << 20  # a few MiB: the 1 MiB read buffer and one conversation
