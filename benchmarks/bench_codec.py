"""Record codec speed: one ~1 KB message, and scan_log over a ~110 MB log of 100k such records.

Run: /tmp/venv/bin/pytest benchmarks/bench_codec.py --benchmark-only -q
Targets: encode + decode of a 1 KB message in a few microseconds; scan_log well above 1 GB/s
without crc and near zlib.crc32's speed with it (`extra_info["GB/s"]` in --benchmark-json).
The twin rows show what the compiled core buys; they are not targets.
"""
from __future__ import annotations

import random
import zlib

import pytest

from convmem._core import codec, pycodec

N_RECORDS = 100_000
pytestmark = pytest.mark.benchmark(group="codec")
MODS = [codec, pycodec]
MSG_IDS = ["compiled-1KB msg", "twin-1KB msg"]


@pytest.fixture(autouse=True)
def _size(benchmark, request):
    """Every codec row is one ~1 KB message except the log scans (sized there)."""
    benchmark.extra_info["size"] = f"one {len(PAYLOAD)} B message"


def _message_args(rng: random.Random) -> tuple:
    words = "memory search index session agent tool 東京 会議 確認 データベース 設定 release".split()
    content = ""
    while len(content.encode()) < 900:
        content += rng.choice(words) + " "
    return (
        rng.randbytes(16), 1_700_000_000_000, 1_700_000_000_000, 1, 1, 0, 1, 50,
        "session-0001", content, None, None, ["project", "decision", "日本語"],
        [(0, rng.randbytes(16))], [rng.randbytes(16)],
    )


ARGS = _message_args(random.Random(1))
PAYLOAD = codec.encode_message(*ARGS)
assert 1000 <= len(PAYLOAD) <= 1100, len(PAYLOAD)


@pytest.fixture(scope="module")
def log() -> bytes:
    rng = random.Random(2)
    payloads = [codec.encode_message(*_message_args(rng)) for _ in range(200)]
    return b"".join(
        codec.encode_record(codec.REC_MESSAGE, i + 1, payloads[i % 200]) for i in range(N_RECORDS)
    )


@pytest.mark.parametrize("mod", MODS, ids=MSG_IDS)
def test_encode_message(benchmark, mod):
    assert benchmark(mod.encode_message, *ARGS) == PAYLOAD


@pytest.mark.parametrize("mod", MODS, ids=MSG_IDS)
def test_decode_message(benchmark, mod):
    assert benchmark(mod.decode_message, PAYLOAD) == ARGS


@pytest.mark.parametrize("mod", MODS, ids=MSG_IDS)
def test_encode_decode_message(benchmark, mod):
    assert benchmark(lambda: mod.decode_message(mod.encode_message(*ARGS))) == ARGS


@pytest.mark.parametrize("size", ["compiled-1KB msg"])
def test_message_content_span(benchmark, size):
    start, n = benchmark(codec.message_content_span, PAYLOAD)
    assert PAYLOAD[start : start + n].decode() == ARGS[9]


@pytest.mark.parametrize("mod", MODS, ids=MSG_IDS)
def test_encode_record(benchmark, mod):
    assert len(benchmark(mod.encode_record, mod.REC_MESSAGE, 42, PAYLOAD)) == 20 + len(PAYLOAD)


def _throughput(benchmark, nbytes: int) -> None:
    benchmark.extra_info["MB"] = round(nbytes / 1e6, 1)
    if benchmark.stats is not None:  # None under --benchmark-disable (CI's smoke run)
        benchmark.extra_info["GB/s"] = round(nbytes / benchmark.stats.stats.median / 1e9, 2)


@pytest.mark.parametrize("verify_crc", [True, False], ids=["compiled-crc-100k records", "compiled-nocrc-100k records"])
def test_scan_log(benchmark, log, verify_crc):
    benchmark.extra_info["size"] = f"{N_RECORDS} records, {len(log)} B log"
    scan = benchmark.pedantic(codec.scan_log, (log, 0, -1, verify_crc), rounds=10, iterations=1)
    assert len(scan.offsets) == N_RECORDS and scan.error is None
    _throughput(benchmark, len(log))


def test_zlib_crc32_reference(benchmark, log):
    benchmark.extra_info["size"] = f"{len(log)} B"
    benchmark.pedantic(zlib.crc32, (log,), rounds=10, iterations=1)
    _throughput(benchmark, len(log))
