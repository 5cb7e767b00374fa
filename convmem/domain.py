"""The vocabulary of the contract, defined once: roles, memory kinds and tiers, relation types,
read views, and every numeric limit (docs/SERVER.md, the spec's tables).

The stored record keeps roles, kinds, tiers and relation types as their index in these tuples,
so their order is part of the log format (docs/FORMAT.md): append, never reorder.
Validation, the tool schemas, the catalog and the record shaping all read them from here.
"""
from __future__ import annotations

ROLES = ("user", "assistant", "system")
KINDS = ("conversation", "episode", "semantic", "procedure", "preference", "summary")
TIERS = ("short", "mid", "long", "discard")
RELATION_TYPES = ("depends_on", "derived_from", "supersedes", "related_to")
VIEWS = ("history", "content", "context", "sessions")

ALL_KINDS_MASK = (1 << len(KINDS)) - 1
ALL_TIERS_MASK = (1 << len(TIERS)) - 1
ALL_RELATION_TYPES_MASK = (1 << len(RELATION_TYPES)) - 1

# -- sizes, in UTF-8 bytes where the spec says bytes -----------------------------------------
MAX_SESSION_BYTES = 256
MAX_CONTENT_BYTES = 1024 * 1024
MAX_QUERY_BYTES = 4096
MAX_TOOL_CALL_ID_BYTES = 256
MAX_TAGS = 32
MAX_TAG_BYTES = 128
MAX_SUMMARY_BYTES = 4096
MAX_RELATIONS = 32
MAX_SOURCES = 64
# metadata/filters JSON is parsed up to the transports' body limit, so that an oversized but valid
# argument is refused by the field at fault (summary must be at most 4096 bytes), not by its size.
MAX_JSON_ARG_BYTES = 16 * 1024 * 1024
MAX_FILTER_VALUES = 64  # entries of filters_json.kinds / .tiers
MAX_RELATION_TYPE_VALUES = 16  # entries of relation_types_json
MAX_CURSOR_CHARS = 2048

# -- integer ranges of the tools' arguments: (lowest, highest or None, default) --------------
IMPORTANCE = (0, 100, 50)
HISTORY_LIMIT = (1, 1000, 100)  # read_messages limit (history and sessions views)
CONTENT_OFFSET = (0, None, 0)
CONTENT_LIMIT = (1, 65536, 4096)
CONTEXT_BEFORE = (0, 10, 1)
CONTEXT_AFTER = (0, 10, 1)
RELATION_DEPTH = (0, 2, 1)
SEARCH_LIMIT = (1, 100, 20)
SEARCH_CONTEXT_SIZE = (0, 3, 0)
MIN_IMPORTANCE = (0, 100, 0)
# Optional arguments of the extended schemas (--toolsets; docs/SERVER.md)
SNIPPET_BYTES = (64, 65536, None)  # search_messages / sessions view: cut text to this many bytes
SEARCH_CURSOR_DEPTH = 10_000  # results a search cursor pages through, at most
MAX_SEARCH_CURSOR_CHARS = 16_384  # a search cursor carries its query's statistics
ORDERS = ("asc", "desc")  # read_messages order (history, sessions)
LIST_DELETED_LIMIT = (1, 1000, 100)  # list_deleted limit (the admin toolset)

# -- answers ------------------------------------------------------------------------------------
RESPONSE_BUDGET = 8 * 1024 * 1024 - 16 * 1024  # ~8 MiB of items, keeping room for the envelope
CONTEXT_MESSAGE_CAP = 50  # messages in one context view, the anchor included

MAX_TIMESTAMP_MS = (1 << 48) - 1  # timestamps: 48 bits, as in a ULID
# Messages and stored versions are numbered in int32 columns (docs/FORMAT.md, "Limits"): a write
# that would pass these is refused before anything is written (rebuild_index drops old versions).
MAX_MESSAGES = (1 << 31) - 2
MAX_VERSIONS = (1 << 31) - 2
MAX_REVISION = (1 << 32) - 1

# -- the recall toolset (recall, start_session, list_tags, remember) ------------------------------
# Token budgets are estimates (api/budget.py); 500k tokens stay far inside the response budget.
BUDGET_TOKENS = (1, 500_000, 4000)
RECALL_LIMIT = (1, 50, 10)  # search hits a recall bundle starts from
RECALL_NEIGHBOURS = (0, 3, 1)  # messages before and after each hit, in its session
RECALL_RELATION_DEPTH = (0, 1, 1)
LIST_TAGS_LIMIT = (1, 1000, 100)
NEAR_DUPLICATE_SIMILARITY = 0.5  # token-set Jaccard at or above which a hit is a near-duplicate
