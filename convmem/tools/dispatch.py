"""Run one tool call against a MemoryStore and encode its result as the spec's JSON text.

`run_tool` never raises: application errors (ConvMemError) become the spec's error payload, and
anything unexpected becomes INTERNAL_ERROR with a generic message while the traceback goes to the
log (stderr). It is synchronous; the server calls it in a worker thread.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from convmem.errors import INTERNAL_ERROR, VALIDATION_ERROR, ConvMemError

from .schemas import ToolSpec
from .toolsets import CONTRACT, ToolCatalog

logger = logging.getLogger(__name__)

# A parameter name is echoed in an error message only if it looks like one: names are caller
# input, and a 10 MB or non-UTF-8-encodable "name" must not end up in the result.
_PRINTABLE_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_MAX_NAMES_SHOWN = 5


@dataclass(frozen=True)
class ToolOutcome:
    text: str  # the JSON text of the result payload
    is_error: bool


def encode_payload(payload: Mapping[str, Any]) -> str:
    """The spec's JSON text: compact, UTF-8 (never ASCII-escaped)."""
    return orjson.dumps(payload).decode("utf-8")


def error_outcome(code: str, message: str) -> ToolOutcome:
    return ToolOutcome(encode_payload(ConvMemError(code, message).to_payload()), is_error=True)


def _describe_names(names: list[Any]) -> str:
    shown = sorted(n for n in names if isinstance(n, str) and _PRINTABLE_NAME.fullmatch(n))[:_MAX_NAMES_SHOWN]
    hidden = len(names) - len(shown)
    parts = [f"'{n}'" for n in shown]
    if hidden:
        parts.append(f"{hidden} more" if shown else f"{hidden} with a name that cannot be shown")
    return ", ".join(parts)


def check_arguments(spec: ToolSpec, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
    """Arguments as keyword arguments for the store; unknown or missing names raise VALIDATION_ERROR.

    Missing or null `arguments` is an empty object. Values are not checked here: MemoryStore
    validates them (types, ranges, byte limits) and names the field in its errors.
    """
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):  # (MCP's SDK refuses these first; run_tool's callers may not)
        raise ConvMemError(VALIDATION_ERROR, f"{spec.name}: arguments must be an object")
    unknown = [name for name in arguments if name not in spec.parameters]
    if unknown:
        plural = "s" if len(unknown) > 1 else ""
        raise ConvMemError(
            VALIDATION_ERROR,
            f"{spec.name}: unknown parameter{plural} {_describe_names(unknown)}; "
            f"accepted: {', '.join(sorted(spec.parameters)) or 'none'}",
        )
    missing = [name for name in spec.required if name not in arguments]
    if missing:
        raise ConvMemError(VALIDATION_ERROR, f"{spec.name}: missing required parameter '{missing[0]}'")
    return dict(arguments)


def run_tool(store: Any, name: str, arguments: Mapping[str, Any] | None,
             catalog: ToolCatalog = CONTRACT) -> ToolOutcome:
    """Call the MemoryStore method for tool `name` of `catalog` and encode what it returns or
    raises. A tool (or an argument) of a toolset the catalog does not have is unknown."""
    try:
        spec = catalog.by_name.get(name)
        if spec is None:
            return error_outcome(VALIDATION_ERROR, "unknown tool")
        kwargs = check_arguments(spec, arguments)
        payload = getattr(store, spec.name)(**kwargs)
        # delete_message's {"status": "NOT_FOUND"} is a normal answer, not an application error.
        is_error = False
    except ConvMemError as exc:
        payload, is_error = exc.to_payload(), True
    except Exception:
        logger.exception("tool call failed unexpectedly")
        return error_outcome(INTERNAL_ERROR, "internal error")
    try:
        return ToolOutcome(encode_payload(payload), is_error)
    except Exception:
        logger.exception("tool result could not be encoded")
        return error_outcome(INTERNAL_ERROR, "internal error")
