"""benchmarks/run_all.py: each benchmark writes its own summary rows; together they are the committed summary."""

import json
from pathlib import Path

from benchmarks import run_all

ROOT = Path(__file__).resolve().parents[2]


def test_the_summary_from_each_benchmarks_rows_is_the_committed_one():
    # benchmarks/results/summary.json was written by the hand-written rows of run_all before each benchmark owned
    # its own: the same files must give the same rows, in the same order.
    committed = json.loads((ROOT / "benchmarks" / "results" / "summary.json").read_text())
    assert run_all.summary_rows() == committed["rows"]


def test_every_benchmark_has_a_main_and_summary_rows_and_a_missing_result_gives_no_row(monkeypatch, tmp_path):
    import importlib

    from benchmarks import _common

    monkeypatch.setattr(_common, "RESULTS_DIR", tmp_path)
    for name in run_all.BENCHMARKS:
        module = importlib.import_module(f"benchmarks.{name}")
        assert callable(module.main) and module.summary_rows() == [], name
    (tmp_path / "advantages.json").write_text(
        json.dumps(
            {
                "params": {"n": 8, "t": 4},
                "speedup": 12.4,
                "median_ms": 3.21,
                "pass": True,
                "load_average_end": [0.5, 0.7],
                "date": "d",
            }
        )
    )
    assert run_all.summary_rows() == [
        [
            "advantages.py",
            "process_advantages N=8 T=4, 1 thread (12x the Python loop)",
            "3.2 ms",
            "<= 50 ms",
            "pass",
            "0.5 / 0.7",
            "d",
        ]
    ]
