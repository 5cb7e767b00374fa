"""Build the compiled core (convmem/_core/*.pyx).

There is no pure-Python fallback at install time: without a C compiler the build fails.
CONVMEM_DEBUG=1 builds with -O0 -g, Cython line tracing, annotation, bounds / wraparound /
initialized checks and the invariant checks of _common.h (CM_ASSERT: abort with file:line; compiled
out of release builds). CONVMEM_SANITIZE=1 adds AddressSanitizer and UBSan (with or without
CONVMEM_DEBUG; running the suite under it: docs/DESIGN.md "Debug and sanitizer builds").

The Cython directives live here only: no module sets its own (no `# cython:` headers, no
per-function boundscheck/wraparound/cdivision decorators), so the debug build's checks reach every
function. Release builds run without bounds checks and with C division everywhere; every hot loop
works on raw pointers, where Cython never checks bounds anyway.
"""
import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

try:
    import numpy
    from Cython.Build import cythonize
except ImportError as exc:  # pragma: no cover - build-time guard
    sys.exit(f"convmem: building the compiled core needs Cython>=3 and numpy ({exc})")

DEBUG = os.environ.get("CONVMEM_DEBUG", "") not in ("", "0")
SANITIZE = os.environ.get("CONVMEM_SANITIZE", "") not in ("", "0")
CORE = Path("convmem") / "_core"
# In dependency order: postings and score cimport functions of the modules before them.
MODULES = ["codec", "tokenizer", "shared", "idmap", "syncer", "postings", "score", "sections", "query", "index", "compact"]

directives = {
    "language_level": 3,
    "embedsignature": True,
    "binding": False,
    "initializedcheck": DEBUG,
    "boundscheck": DEBUG,
    "wraparound": DEBUG,
    "cdivision": not DEBUG,
}
macros = [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]
if DEBUG:
    directives["linetrace"] = True
    macros += [("CYTHON_TRACE_NOGIL", "1"), ("CONVMEM_DEBUG", "1")]
    cflags = ["-O0", "-g", "-Wall"]
else:
    # (CM_ASSERT compiles to nothing here: the locals only debug checks read are unused)
    cflags = ["-O3", "-Wall", "-Wno-unused-function", "-Wno-unreachable-code",
              "-Wno-unused-but-set-variable"]
# Scores must be bit-identical to the pure-Python oracle: never fuse multiply-adds.
cflags.append("-ffp-contract=off")
ldflags = []
if SANITIZE:
    san = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
    cflags += san + ["-g"]
    ldflags += san

only = os.environ.get("CONVMEM_BUILD_ONLY")  # developer aid: build a subset, e.g. "tokenizer"
selected = [m for m in MODULES if not only or m in only.split(",")]

extensions = [
    Extension(
        f"convmem._core.{name}",
        [str(CORE / f"{name}.pyx")],
        include_dirs=[numpy.get_include(), str(CORE)],
        define_macros=macros,
        extra_compile_args=cflags,
        extra_link_args=ldflags,
        depends=[str(CORE / "_common.h"), str(CORE / "_common.pxd")],
        libraries=["z"] if name == "codec" else [],
    )
    for name in selected
    if (CORE / f"{name}.pyx").exists()
]

NO_COMPILER = (
    "convmem: building the compiled core failed. convmem needs a working C compiler and the Python "
    "headers (for example: apt-get install build-essential python3-dev); it has no slower "
    "pure-Python fallback to install instead."
)


class BuildExt(build_ext):
    """Turn a missing or broken C compiler into one clear message."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # CCompilerError, CompileError, PlatformError, OSError...
            sys.exit(f"{NO_COMPILER}\n({type(exc).__name__}: {exc})")

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:
            sys.exit(f"{NO_COMPILER}\n({type(exc).__name__}: {exc})")


setup(
    cmdclass={"build_ext": BuildExt},
    ext_modules=cythonize(
        extensions,
        compiler_directives=directives,
        annotate=DEBUG,
        include_path=[str(CORE)],
    ),
)
