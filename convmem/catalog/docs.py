"""What the search index is given for one stored version of a message (a "doc"): the token keys
of its fields, the hashes of its tags and its flags. Computed from the record alone, before the
store is touched, so that a write can do it while its flush is in flight."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .._core import codec, tokenizer

Record = tuple  # a decoded MESSAGE payload (codec.decode_message); its fields by name below
# (the codec's R_* constants, through the core switch, for the layers above the core)
R_ULID, R_TIMESTAMP, R_UPDATED_AT, R_REVISION, R_ROLE = (
    codec.R_ULID, codec.R_TIMESTAMP, codec.R_UPDATED_AT, codec.R_REVISION, codec.R_ROLE)
R_KIND, R_TIER, R_IMPORTANCE, R_SESSION_ID, R_CONTENT = (
    codec.R_KIND, codec.R_TIER, codec.R_IMPORTANCE, codec.R_SESSION_ID, codec.R_CONTENT)
R_TOOL_CALL_ID, R_SUMMARY, R_TAGS, R_RELATIONS, R_SOURCES = (
    codec.R_TOOL_CALL_ID, codec.R_SUMMARY, codec.R_TAGS, codec.R_RELATIONS, codec.R_SOURCES)

FLAG_HAS_SUMMARY = 1  # doc flags
FLAG_HAS_RELATIONS = 2
EMPTY_KEYS = np.zeros(0, dtype=np.uint64)
FieldKeys = tuple[np.ndarray, np.ndarray, np.ndarray]  # content, summary, tags


def field_keys(rec: Record) -> FieldKeys:
    """The token keys of a message's content, summary and tags (all tags' tokens together)."""
    summary = rec[R_SUMMARY]
    return (tokenizer.token_keys(rec[R_CONTENT]),
            tokenizer.token_keys(summary) if summary else EMPTY_KEYS, tag_keys(rec[R_TAGS]))


def tag_keys(tags: list[str]) -> np.ndarray:
    if not tags:
        return EMPTY_KEYS
    if len(tags) == 1:
        return tokenizer.token_keys(tags[0])  # (no concatenate for the common single tag)
    return np.concatenate([tokenizer.token_keys(t) for t in tags])


def tag_hashes(tags: list[str]) -> np.ndarray:
    """The hashes the index keeps for a doc's tags (and a tag filter is matched against)."""
    if not tags:
        return EMPTY_KEYS
    return np.array([tokenizer.hash_utf8(t.encode("utf-8")) for t in tags], dtype=np.uint64)


def doc_flags(rec: Record) -> int:
    return ((FLAG_HAS_SUMMARY if rec[R_SUMMARY] is not None else 0)
            | (FLAG_HAS_RELATIONS if rec[R_RELATIONS] else 0))


class Prepared(NamedTuple):
    """What adding a message's doc needs that can be computed without touching the store."""

    keys: FieldKeys
    tag_hashes: np.ndarray
    flags: int


def prepare(rec: Record) -> Prepared:
    return Prepared(field_keys(rec), tag_hashes(rec[R_TAGS]), doc_flags(rec))
