"""The admin toolset's tools (list_deleted, restore_message): names, descriptions, input schemas.
Listed only with `--toolsets admin` (or `all`)."""
from __future__ import annotations

from .schemas import ToolSpec

ADMIN_TOOL_SPECS: tuple[ToolSpec, ...] = ()
