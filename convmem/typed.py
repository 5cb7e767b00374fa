"""The types of the Python API: what MemoryStore's (and SharedStore's) methods take and return.

These describe the intended shapes for editors and type checkers; nothing here checks anything
at run time. The store still validates every argument itself (validation.py), because MCP
clients send anything, and answers a wrong type with VALIDATION_ERROR naming the field.
The answers are plain dicts (the tools' JSON); the TypedDicts below name their keys.
"""
from __future__ import annotations

from typing import Literal, NotRequired, TypedDict, get_args

from .domain import KINDS, ORDERS, RELATION_TYPES, ROLES, TIERS, VIEWS
from .errors import ConvMemError

Role = Literal["user", "assistant", "system"]
Kind = Literal["conversation", "episode", "semantic", "procedure", "preference", "summary"]
Tier = Literal["short", "mid", "long", "discard"]
RelationType = Literal["depends_on", "derived_from", "supersedes", "related_to"]
View = Literal["history", "content", "context", "sessions"]
Order = Literal["asc", "desc"]
# Literal needs the values written out; these keep them equal to the vocabulary in domain.py.
for _literal, _values in ((Role, ROLES), (Kind, KINDS), (Tier, TIERS),
                          (RelationType, RELATION_TYPES), (View, VIEWS), (Order, ORDERS)):
    assert get_args(_literal) == _values, (_literal, _values)


class Relation(TypedDict):
    type: RelationType
    message_id: str  # a canonical 26-character ULID


class MetadataInput(TypedDict, total=False):
    """The `metadata` argument (the object metadata_json holds): every field optional."""
    tool_call_id: str
    tags: list[str]
    memory_tier: Tier
    memory_kind: Kind
    importance: int  # 0-100
    summary: str
    relations: list[Relation]
    source_message_ids: list[str]


class Metadata(TypedDict):
    tool_call_id: NotRequired[str]  # only when set
    tags: list[str]
    memory_tier: Tier
    memory_kind: Kind
    importance: int
    summary: NotRequired[str]  # only when set
    relations: list[Relation]
    source_message_ids: list[str]


class Message(TypedDict):
    message_id: str
    session_id: str
    timestamp: int  # milliseconds since the epoch
    role: Role
    content: str
    revision: int
    updated_at: int
    metadata: Metadata


class ImportItem(TypedDict):
    """One item of import_messages / import_message_batch (a convmem JSON Lines line)."""
    session_id: str
    role: Role
    content: str
    metadata: NotRequired[MetadataInput]
    timestamp: NotRequired[int]
    message_id: NotRequired[str]
    revision: NotRequired[int]
    updated_at: NotRequired[int]


# -- answers ------------------------------------------------------------------------------------
class WriteAnswer(TypedDict):
    status: Literal["OK"]
    message: Message


class UpdateAnswer(TypedDict):
    status: Literal["OK"]
    changed: bool
    message: Message


class DeleteAnswer(TypedDict):
    status: Literal["OK", "NOT_FOUND"]


class Neighbours(TypedDict):
    before: list[Message]
    after: list[Message]


class SearchHit(Message):
    score: float
    score_breakdown: dict[str, float]  # content, summary, tags
    matched_fields: list[str]
    relation_count: int
    context_preview: NotRequired[Neighbours]  # only with context_size > 0


class SearchAnswer(TypedDict):
    results: list[SearchHit]


HistoryPage = TypedDict("HistoryPage", {"history": list[Message], "nextCursor": NotRequired[str]})


class SessionInfo(TypedDict):
    session_id: str
    message_count: int
    kind_counts: dict[str, int]
    representative_summary: str
    started_at: int
    last_message_at: int


SessionsPage = TypedDict("SessionsPage", {"sessions": list[SessionInfo], "nextCursor": NotRequired[str]})


class ContentRange(TypedDict):
    message_id: str
    revision: int
    total_bytes: int
    content_offset: int
    next_content_offset: int
    complete: bool
    content: str


class ContentAnswer(TypedDict):
    content_range: ContentRange


class RelatedEntry(TypedDict):
    type: RelationType
    direction: Literal["outgoing", "incoming"]
    depth: int
    message: NotRequired[Message]  # a live message
    message_id: NotRequired[str]  # a deleted one (with status "deleted")
    status: NotRequired[Literal["deleted"]]


class SessionCount(TypedDict):
    session_id: str
    message_count: int


class ContextAnswer(TypedDict):
    message: Message
    chronological_context: Neighbours
    relations: list[RelatedEntry]
    session: SessionCount
    truncated: bool


ReadAnswer = HistoryPage | SessionsPage | ContentAnswer | ContextAnswer


class RebuildAnswer(TypedDict):
    status: Literal["OK"]
    messages_indexed: int
    records_removed: int
    bytes_before: int
    bytes_after: int


class HealthAnswer(TypedDict):
    status: Literal["OK", "DEGRADED"]
    format_version: int
    log_size: int
    snapshot_size: int
    active_messages: int
    session_count: int
    deleted_messages: int
    last_sequence: int
    update_records: int
    dead_bytes: int
    memory_estimate: dict[str, int]
    io: dict[str, int]
    recovered_tail: bool
    snapshot_valid: bool
    last_error: str


class _Marker:
    """A non-error answer of import_message_batch(existing="compare") (bulk.PRESENT, DELETED)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


# import_message_batch's entry per item: None (imported), its error, or PRESENT / DELETED.
ImportOutcome = None | ConvMemError | _Marker
