"""Snapshot files rewritten as older convmem versions wrote them (for the compatibility tests)."""
from __future__ import annotations

import struct
import zlib
from pathlib import Path

import orjson

from convmem.store.snapshot import xxh3


def as_format_2(path: Path) -> None:
    """Rewrite a snapshot as format 2 wrote it: crc32 section checksums under "crc"."""
    data = bytearray(path.read_bytes())
    _, _, meta_len, _, _ = struct.unpack_from("<8sIIII", data, 0)
    meta = orjson.loads(bytes(data[24:24 + meta_len]))
    for sec in meta["sections"]:
        body = bytes(data[sec["offset"]:sec["offset"] + sec["nbytes"]])
        assert sec.pop("xxh3") == xxh3(body)
        sec["crc"] = zlib.crc32(body)
    new = orjson.dumps(meta)
    assert len(new) <= meta_len  # crc32s are shorter: the sections stay where they are
    new = new.ljust(meta_len)
    head = b"CVMEMSNP" + struct.pack("<III", 2, meta_len, zlib.crc32(new))
    data[:24] = head + struct.pack("<I", zlib.crc32(head))
    data[24:24 + meta_len] = new
    path.write_bytes(bytes(data))
