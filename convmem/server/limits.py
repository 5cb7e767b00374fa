"""Limits shared by the transports (sizes in bytes, times in seconds)."""
from __future__ import annotations

# The largest request accepted: a 1 MiB content may be up to 6 MiB once JSON-escaped (\u0001 per
# control byte), plus metadata and the envelope; the SDK's default 4 MiB cap would refuse valid
# writes. HTTP caps request bodies at this size, stdio caps lines at it.
MAX_REQUEST_BODY = 16 * 1024 * 1024
