"""The compiled core: record codec, tokenizer, postings index and scoring, and the log's flusher.

The compiled extensions are always used unless CONVMEM_PURE=1 selects the readable pure-Python
twins (pycodec, pytokenizer, pyindex, pyidmap, pysyncer), which exist as test oracles.
`CORE_KIND` says which one is loaded; `convmem --version` prints it.
"""
from __future__ import annotations

import os

PURE = os.environ.get("CONVMEM_PURE", "") not in ("", "0")

if PURE:
    from . import pycodec as codec
    from . import pyidmap as idmap
    from . import pyindex as index
    from . import pysyncer as syncer
    from . import pytokenizer as tokenizer

    CORE_KIND = "pure-python"
else:
    from . import codec, idmap, index, syncer, tokenizer  # type: ignore[no-redef]

    CORE_KIND = "compiled"

__all__ = ["codec", "idmap", "tokenizer", "index", "syncer", "CORE_KIND", "PURE"]
