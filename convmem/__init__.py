"""convmem: a conversation-memory store for LLM agents, served over MCP.

Public API: MemoryStore (one method per MCP tool), ConvMemError, __version__.
"""
from __future__ import annotations

from .errors import ConvMemError

__version__ = "0.1.0"


def __getattr__(name: str):
    # MemoryStore pulls in numpy and the compiled core; `convmem --version` should not need them.
    if name == "MemoryStore":
        from .api import MemoryStore

        return MemoryStore
    raise AttributeError(name)


__all__ = ["MemoryStore", "ConvMemError", "__version__"]
