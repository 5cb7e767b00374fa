"""The library face of convmem: MemoryStore, one method per MCP tool (store.py), with the read
views (views.py), the response budget and cursors (paging.py), record shaping (records.py) and
bulk import and export (bulk.py)."""
from __future__ import annotations

from .store import MemoryStore

__all__ = ["MemoryStore"]
