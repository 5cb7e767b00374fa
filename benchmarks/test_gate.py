"""The gate (gate.py) fails on the two planted regressions: a sleep in the scorer path and
pruning turned off. Run with the suites (`pytest benchmarks`, CI's smoke run included); each
test runs only the check its regression must trip, at the gate's own thresholds."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import gate


def _run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, plant: str, **cfg: object) -> gate.Report:
    monkeypatch.setenv(gate.PLANT_ENV, plant)
    return gate.run(gate.Config(workdir=tmp_path, **cfg))  # type: ignore[arg-type]


PEERS = ["fts5"] + (["tantivy"] if importlib.util.find_spec("tantivy") else [])


@pytest.mark.parametrize("peer", PEERS)
def test_a_sleep_in_the_scorer_fails_the_search_gate(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path, peer: str) -> None:
    """Against each peer alone: CI without tantivy must catch it through FTS5 too."""
    report = _run(monkeypatch, tmp_path, "scorer-sleep", messages=5000, queries=300,
                  checks=("search",), peers=(peer,))
    failed = {f.split(" ")[0] for f in report.failures}
    assert f"search_p50_convmem_over_{peer}" in failed, report
    # the sleep is there: every convmem search took at least PLANT_SLEEP_S
    assert report.figures["search_ms"]["convmem"]["p50"] >= gate.PLANT_SLEEP_S * 1e3


def test_pruning_turned_off_fails_the_scorer_gate(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    report = _run(monkeypatch, tmp_path, "no-pruning", checks=("scorer",))
    failed = {f.split(" ")[0] for f in report.failures}
    assert "scorer_common_p50_shipped_over_exhaustive" in failed, report
    assert report.ratios["scorer_common_p50_shipped_over_exhaustive"] > gate.THRESHOLDS[
        "scorer_common_p50_shipped_over_exhaustive"]


def test_an_unknown_plant_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(gate.PLANT_ENV, "sleep")
    with pytest.raises(SystemExit, match="scorer-sleep"):
        gate.plant()


def test_thresholds_name_only_measured_ratios() -> None:
    """A threshold whose ratio no check produces would never be judged."""
    produced = {"search_p50_convmem_over_fts5", "search_p99_convmem_over_fts5",
                "search_p50_convmem_over_tantivy", "search_core_p50_convmem_over_tantivy",
                "write_wait_median_over_fdatasync_floor", "scorer_common_p50_shipped_over_exhaustive",
                *(f"scorer_{c}_p50_shipped_over_best_forced" for c in ("rare", "mid", "common"))}
    assert set(gate.THRESHOLDS) == produced
