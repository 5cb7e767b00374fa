"""MCP tool layer: input schemas, argument-name check, result and error payloads."""
from __future__ import annotations

from .dispatch import ToolOutcome, check_arguments, encode_payload, error_outcome, run_tool
from .schemas import READ_TOOL_NAMES, TOOL_SPECS, TOOLS_BY_NAME, ToolSpec
from .toolsets import CONTRACT, TOOLSET_NAMES, ToolCatalog, ToolsetError, parse_toolsets

__all__ = [
    "CONTRACT",
    "TOOLSET_NAMES",
    "ToolCatalog",
    "ToolsetError",
    "parse_toolsets",
    "READ_TOOL_NAMES",
    "TOOL_SPECS",
    "TOOLS_BY_NAME",
    "ToolOutcome",
    "ToolSpec",
    "check_arguments",
    "encode_payload",
    "error_outcome",
    "run_tool",
]
