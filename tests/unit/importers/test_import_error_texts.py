"""What a person reads after an import: where a bad line is broken (the byte offset inside the
line, apart from the file's line number), and counts in plain English."""
from __future__ import annotations

import io
import re

import orjson
import pytest

from convmem.importers.common import FileReport, json_problem
from convmem.importers.jsonl import ImportSummary, import_jsonl
from convmem.wording import counted

GOOD = b'{"session_id":"s","role":"user","content":"ok"}\n'


def _summary(store, data: bytes) -> list[str]:
    return import_jsonl(store, io.BytesIO(data)).lines()


def test_invalid_utf8_names_its_byte_offset_in_the_line_and_the_file(store):
    bad = '{"session_id":"s","role":"user","content":"日本 '.encode() + b"\xff" + b'"}\n'
    at = bad.index(b"\xff")
    lines = _summary(store, GOOD + bad)
    assert lines[0] == "imported 1 message, rejected 1 line"
    assert lines[1] == (f"line 2: invalid UTF-8 at byte offset {at} of the line "
                        f"(line starts at file byte offset {len(GOOD)})")


def test_a_syntax_error_is_placed_in_bytes_not_as_line_1_column_n(store):
    bad = '{"content":"日本語", oops}\n'.encode()
    at = bad.index(b"oops")  # 21 bytes in, though the 17th character
    lines = _summary(store, GOOD + GOOD + bad)
    assert re.fullmatch(rf"line 3: invalid JSON at byte offset {at} of the line: .+ \(line starts "
                        rf"at file byte offset {2 * len(GOOD)}\)", lines[1]), lines[1]
    assert "column" not in lines[1] and "line 1" not in lines[1]


def test_a_byte_order_mark_does_not_shift_the_offsets(store):
    lines = _summary(store, b"\xef\xbb\xbf" + b'{"content": "\xff"}\n')
    assert lines[1] == "line 1: invalid UTF-8 at byte offset 13 of the line (line starts at file byte offset 3)"


def test_a_whole_document_gets_line_and_column_too():
    text = b'{"a": 1,\n "b": [1,,2]}'
    with pytest.raises(orjson.JSONDecodeError) as info:
        orjson.loads(text)
    problem = json_problem(text, info.value, record=False)
    assert problem.startswith(f"invalid JSON at line 2, column 10 (byte offset {text.index(b',,') + 1}): ")


@pytest.mark.parametrize(("n", "text"), [(0, "0 lines"), (1, "1 line"), (2, "2 lines"), (21, "21 lines")])
def test_counts_read_as_english(n, text):
    assert counted(n, "line") == text


def test_summaries_say_one_line_and_one_message():
    summary = ImportSummary(imported=1)
    summary.reject(3, "why")
    assert summary.lines()[0] == "imported 1 message, rejected 1 line"
    for i in range(21):
        summary.reject(10 + i, "why")
    assert summary.lines()[-1] == "... and 2 more rejected lines"
    summary.reject(99, "why")
    assert summary.lines()[-1] == "... and 3 more rejected lines"
    report = FileReport(path="f", fmt="codex", records=1, imported=1)
    assert report.line() == "f [codex]: 1 record, 1 imported, 0 already present"
