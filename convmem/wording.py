"""Counts in the messages people read: "1 line", "2 lines", "0 lines"."""
from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and the noun, singular for exactly one (`plural` when adding "s" is wrong)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
