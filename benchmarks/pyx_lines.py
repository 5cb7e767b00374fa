"""Sum a `perf annotate -l` profile of the compiled core by .pyx line.

perf resolves samples to lines of the generated C (score.c:7851) when the build has debug info;
Cython writes a comment naming the .pyx line above each piece of C it generates
(`/* "convmem/_core/score.pyx":87`), so the C line maps back to the line that produced it.

    perf annotate -i perf.data --stdio -l -s SYMBOL | python benchmarks/pyx_lines.py [--top 15]

Reads the "percent file.c:line" summary lines perf prints first; the .c files are found beside
the .pyx files in convmem/_core/ (a build in place keeps them).
"""
from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from functools import lru_cache
from pathlib import Path

CORE = Path(__file__).resolve().parent.parent / "convmem" / "_core"
SUMMARY = re.compile(r"^\s*(\d+\.\d+)\s+(\w+)\.c:(\d+)\s*$")
ORIGIN = re.compile(r'/\* "(convmem/_core/\w+\.pyx)":(\d+)')


@lru_cache(maxsize=None)
def origins(module: str) -> list[str]:
    """For each line of module.c (1-based, index 0 unused), the .pyx line it was generated from."""
    path = CORE / f"{module}.c"
    if not path.is_file():
        raise SystemExit(f"pyx_lines: {path} not found (build in place to keep the generated C)")
    out = [""]
    last = "?"
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        m = ORIGIN.search(line)
        if m:
            last = f"{m.group(1).rsplit('/', 1)[1]}:{m.group(2)}"
        out.append(last)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--top", type=int, default=15)
    args = p.parse_args(argv)
    total: Counter[str] = Counter()
    for line in sys.stdin:
        m = SUMMARY.match(line)
        if m:
            pct, module, n = float(m.group(1)), m.group(2), int(m.group(3))
            table = origins(module)
            total[table[n] if n < len(table) else "?"] += pct
    if not total:
        raise SystemExit("pyx_lines: no 'percent file.c:line' lines on stdin (perf annotate -l --stdio)")
    for where, pct in total.most_common(args.top):
        print(f"{pct:7.2f}%  {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
