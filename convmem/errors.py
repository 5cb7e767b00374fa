"""Application errors: the spec's error codes, raised as ConvMemError."""
from __future__ import annotations

VALIDATION_ERROR = "VALIDATION_ERROR"
NOT_FOUND = "NOT_FOUND"
CONFLICT = "CONFLICT"
BUSY = "BUSY"
IO_ERROR = "IO_ERROR"
CORRUPT_STORE = "CORRUPT_STORE"
INTERNAL_ERROR = "INTERNAL_ERROR"

CODES = frozenset(
    {VALIDATION_ERROR, NOT_FOUND, CONFLICT, BUSY, IO_ERROR, CORRUPT_STORE, INTERNAL_ERROR}
)


class ConvMemError(Exception):
    """An application error with one of the spec's codes.

    `message` never repeats an input value (the spec forbids echoing arguments).
    """

    def __init__(self, code: str, message: str) -> None:
        if code not in CODES:
            raise ValueError(f"unknown error code {code!r}")
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    def to_payload(self) -> dict:
        return {"status": "ERROR", "error": {"code": self.code, "message": self.message}}
