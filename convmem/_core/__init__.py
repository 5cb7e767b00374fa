"""The compiled core: record codec, tokenizer, postings index and scoring, and the log's flusher.

The compiled extensions are always used unless CONVMEM_PURE=1 selects the readable pure-Python
twins (pycodec, pytokenizer, pyindex, pyidmap, pysyncer), which exist as test oracles.
`CORE_KIND` says which one is loaded, `BUILD_TYPE` how the compiled one was built ("release", or
"debug" if any module is a CONVMEM_DEBUG or unoptimized build; "n/a" for the twins) and
`CORE_PATH` where it was loaded from; `convmem --version` prints all three.
"""
from __future__ import annotations

import os
from pathlib import Path

PURE = os.environ.get("CONVMEM_PURE", "") not in ("", "0")

if PURE:
    from . import pycodec as codec
    from . import pyidmap as idmap
    from . import pyindex as index
    from . import pysyncer as syncer
    from . import pytokenizer as tokenizer

    CORE_KIND = "pure-python"
    BUILD_TYPE = "n/a"
    DEBUG_MODULES: tuple[str, ...] = ()
else:
    from . import (codec, compact, idmap, index, postings, query, score,  # type: ignore[no-redef]
                   sections, syncer, tokenizer)

    CORE_KIND = "compiled"
    # One module left from a debug build makes the whole core unfit for measuring.
    DEBUG_MODULES = tuple(m.__name__.rsplit(".", 1)[1]
                          for m in (codec, compact, idmap, index, postings, query, score, sections,
                                    syncer, tokenizer)
                          if getattr(m, "BUILD", "debug") != "release")
    BUILD_TYPE = "debug" if DEBUG_MODULES else "release"

CORE_PATH = str(Path(index.__file__).resolve().parent)

__all__ = ["codec", "idmap", "tokenizer", "index", "syncer", "CORE_KIND", "BUILD_TYPE", "CORE_PATH",
           "DEBUG_MODULES", "PURE"]
