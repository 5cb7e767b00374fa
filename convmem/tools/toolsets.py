"""Which tools a server lists: the contract's seven, exactly, unless toolsets are asked for.

`convmem serve` with no `--toolsets` is the contract byte for byte: the seven tools, their schemas,
their answers. Naming toolsets (`--toolsets core,recall,admin`, or `all`) lists the seven tools with
their optional extensions (`core`) and adds the named groups; the seven are always there, so
`--toolsets recall` is `core` plus `recall`. A ToolCatalog is what one server (or one relayed MCP
session) offers; the store's owner serves attached processes with each one's own catalog.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .admin_tools import ADMIN_TOOL_SPECS
from .recall_tools import RECALL_TOOL_SPECS
from .schemas import EXTENDED_TOOL_SPECS, TOOL_SPECS, ToolSpec

TOOLSET_SPECS: dict[str, tuple[ToolSpec, ...]] = {
    "core": EXTENDED_TOOL_SPECS,
    "recall": RECALL_TOOL_SPECS,
    "admin": ADMIN_TOOL_SPECS,
}
TOOLSET_NAMES: tuple[str, ...] = tuple(TOOLSET_SPECS)


class ToolsetError(ValueError):
    """A --toolsets value that names no toolset."""


def parse_toolsets(text: str | None) -> tuple[str, ...]:
    """`None` (option not given) is the contract: (). `all` is every toolset; otherwise a comma
    list of names, in any order, duplicates ignored. `core` is implied by any other name."""
    if text is None:
        return ()
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise ToolsetError(f"--toolsets needs a comma-separated list of: {', '.join(TOOLSET_NAMES)}, or all")
    if names == ["all"]:
        return TOOLSET_NAMES
    unknown = [n for n in names if n not in TOOLSET_SPECS]
    if unknown:
        raise ToolsetError(f"unknown toolset {unknown[0]!r}; toolsets are: {', '.join(TOOLSET_NAMES)}, or all")
    chosen = {"core", *names}
    return tuple(n for n in TOOLSET_NAMES if n in chosen)


@dataclass(frozen=True)
class ToolCatalog:
    """The tools one MCP session offers, in tools/list order."""

    toolsets: tuple[str, ...]  # () is the contract exactly
    specs: tuple[ToolSpec, ...]
    by_name: Mapping[str, ToolSpec] = field(repr=False)
    read_names: frozenset[str] = field(repr=False)

    @classmethod
    def of(cls, toolsets: Iterable[str]) -> "ToolCatalog":
        names = tuple(toolsets)
        if not names:
            specs = TOOL_SPECS
        else:
            specs = tuple(spec for name in TOOLSET_NAMES if name in names for spec in TOOLSET_SPECS[name])
        return cls(names, specs, {s.name: s for s in specs},
                   frozenset(s.name for s in specs if not s.writes))


CONTRACT = ToolCatalog.of(())
EVERY_TOOL = ToolCatalog.of(TOOLSET_NAMES)
# What an owner runs for an attached process (owner/listener.py) and which of those only read
# (owner/relay.py: a write in flight when the owner ends is never sent twice).
ALL_TOOL_NAMES: frozenset[str] = frozenset(EVERY_TOOL.by_name)
ALL_READ_TOOL_NAMES: frozenset[str] = EVERY_TOOL.read_names
