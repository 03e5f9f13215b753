"""Run every benchmark, one after the other, each in a fresh process, then print the summary table.

    python -m benchmarks.run_all [--only overhead,metrics] [--skip qlora_memory] [--summary-only]

Each benchmark writes `benchmarks/results/<name>.json`; the summary (one row per target, from those files) is
printed as markdown and written to `benchmarks/results/summary.json`. Never run two benchmarks at once: they
measure ratios side by side, but each takes the machine's cores for itself.
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import time

from benchmarks import _common

# Run one after the other in this order, and summarised in it: a new benchmark is a module with `main` and
# `summary_rows` plus its name here.
BENCHMARKS = ("overhead", "advantages", "metrics", "prm_scoring", "eval_throughput", "qlora_memory")


def summary_rows() -> list[list]:
    """One row per target, each benchmark's own (its module's ``summary_rows``): benchmark, measure, value, target,
    result, load average, date. Importing a benchmark runs nothing: each measures only under ``main``."""
    rows = []
    for name in BENCHMARKS:
        module = importlib.import_module(f"benchmarks.{name}")
        rows += [[f"{name}.py", *row] for row in module.summary_rows()]
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--only", default=None, help="comma-separated benchmark names")
    parser.add_argument("--skip", default="", help="comma-separated benchmark names to leave out")
    parser.add_argument("--summary-only", action="store_true", help="print the summary of the existing results")
    args = parser.parse_args(argv)
    names = [n for n in (args.only.split(",") if args.only else BENCHMARKS) if n and n not in args.skip.split(",")]
    unknown = set(names) - set(BENCHMARKS)
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}; known: {', '.join(BENCHMARKS)}")
    failed = []
    if not args.summary_only:
        for name in names:
            load = _common.load_cell(_common.load_average())
            print(f"\n=== benchmarks/{name}.py (load average {load}) ===", flush=True)
            start = time.perf_counter()
            code = subprocess.call([sys.executable, "-m", f"benchmarks.{name}"], cwd=_common.ROOT)
            print(f"=== {name}: exit code {code}, {time.perf_counter() - start:.0f} s ===", flush=True)
            if code:
                failed.append(name)
    rows = summary_rows()
    table = _common.markdown_table(
        ["benchmark", "measure", "value", "target", "result", "load avg (1/5/15 min)", "date"], rows
    )
    _common.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (_common.RESULTS_DIR / "summary.json").write_text(json.dumps({"rows": rows, "table": table}, indent=2) + "\n")
    print("\n" + table)
    if failed:
        print(f"\nbenchmarks that crashed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
