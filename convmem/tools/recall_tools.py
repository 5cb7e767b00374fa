"""The recall toolset's tools (recall, start_session, list_tags, remember): names, descriptions,
input schemas. Listed only with `--toolsets recall` (or `all`)."""
from __future__ import annotations

from .schemas import ToolSpec

RECALL_TOOL_SPECS: tuple[ToolSpec, ...] = ()
