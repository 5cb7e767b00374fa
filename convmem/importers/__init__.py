"""Importers and exporters."""
from __future__ import annotations

from .jsonl import ImportSummary, ProgressBar, Rejected, export_jsonl, import_jsonl

__all__ = ["ImportSummary", "ProgressBar", "Rejected", "export_jsonl", "import_jsonl"]
