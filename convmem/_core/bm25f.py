"""BM25F's configuration, checked the same way by the compiled index and its pure-Python twin
(pyindex): a plain module both import, so the twin stays free of compiled code."""
from __future__ import annotations


def check_config(k1, weights, b) -> tuple[float, tuple[float, ...], tuple[float, ...]]:
    """(k1, weights, b) as floats, or ValueError: k1 > 0, one weight >= 0 and one 0 <= b <= 1
    per field (content, summary, tags)."""
    weights = tuple(float(w) for w in weights)
    b = tuple(float(x) for x in b)
    if len(weights) != 3 or len(b) != 3:
        raise ValueError("weights and b need one value per field (content, summary, tags)")
    if not k1 > 0 or any(not w >= 0 for w in weights) or any(not 0 <= x <= 1 for x in b):
        raise ValueError("need k1 > 0, weights >= 0 and 0 <= b <= 1")
    return float(k1), weights, b
