"""Run every benchmark, one after the other, each in a fresh process, then print the summary table.

    python -m benchmarks.run_all [--only overhead,metrics] [--skip qlora_memory] [--summary-only]

Each benchmark writes `benchmarks/results/<name>.json`; the summary (one row per target, from those files) is
printed as markdown and written to `benchmarks/results/summary.json`. Never run two benchmarks at once: they
measure ratios side by side, but each takes the machine's cores for itself.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from benchmarks import _common as C

BENCHMARKS = ("advantages", "metrics", "overhead", "eval_throughput", "qlora_memory", "prm_scoring")


def _load(name: str) -> dict | None:
    path = C.RESULTS_DIR / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _load_cell(values) -> str:
    return " / ".join(str(v) for v in values) if values else ""


def summary_rows() -> list[list]:
    """One row per target: benchmark, measure, value, target, result, load average, date."""
    rows = []
    r = _load("overhead")
    if r:
        for key, label, target in (
            ("off", "GRPOExtTrainer, extensions off / TRL GRPOTrainer", "<= 1.02x"),
            ("all_on", "GRPOExtTrainer, all on / TRL GRPOTrainer (same beta)", "<= 1.10x"),
        ):
            ratio = r["ratios"][key]
            cpu = r.get("cpu_time_ratios", {}).get(key)
            value = f"{ratio['median_of_ratios']:.3f}x" + (f" (CPU time {cpu['median_of_ratios']:.3f}x)" if cpu else "")
            result = C.verdict(r["pass"][key])
            if "pass_cpu_time" in r:
                result += f" (CPU time: {C.verdict(r['pass_cpu_time'][key])})"
            rows.append(
                [
                    "overhead.py",
                    f"{label}: median step time",
                    value,
                    target,
                    result,
                    _load_cell(r["load_average_end"]),
                    r["date"],
                ]
            )
    r = _load("advantages")
    if r:
        rows.append(
            [
                "advantages.py",
                f"process_advantages N={r['params']['n']} T={r['params']['t']}, 1 thread "
                f"({r['speedup']:.0f}x the Python loop)",
                f"{r['median_ms']:.1f} ms",
                "<= 50 ms",
                C.verdict(r["pass"]),
                _load_cell(r["load_average_end"]),
                r["date"],
            ]
        )
    r = _load("metrics")
    if r:
        rows.append(
            [
                "metrics.py",
                f"pass@k + maj@k, {r['params']['problems']} problems, n={r['params']['n']}, "
                f"k=1..{r['params']['ks'][-1]}",
                f"{r['median_seconds']:.2f} s",
                "<= 2 s",
                C.verdict(r["pass"]),
                _load_cell(r["load_average_end"]),
                r["date"],
            ]
        )
        large = r.get("large")
        if large:
            rows.append(
                [
                    "metrics.py",
                    f"every metric + bootstrap, {large['problems']} problems, n={large['n']}, "
                    f"k=1..{large['ks'][-1]} (powers of two)",
                    f"{large['total_seconds']['median']:.1f} s",
                    "<= 30 s",
                    C.verdict(large["pass"]),
                    _load_cell(r["load_average_end"]),
                    r["date"],
                ]
            )
    r = _load("prm_scoring")
    if r:
        shares = " / ".join(f"{v['median_of_ratios']:.2f}x" for v in r["prm_share_of_step"].values())
        rows.append(
            [
                "prm_scoring.py",
                f"PRM time / GRPO step time ({', '.join(r['prm_share_of_step'])})",
                shares,
                "(info)",
                "",
                _load_cell(r["load_average_end"]),
                r["date"],
            ]
        )
    r = _load("eval_throughput")
    if r:
        for res in r["results"]:
            rows.append(
                [
                    "eval_throughput.py",
                    f"samples/s ours / lm-eval HFLM, batch {res['rows']} sequences",
                    f"{res['ratio']['median_of_ratios']:.2f}x",
                    ">= 1.5x",
                    C.verdict(res["pass"]),
                    _load_cell(res["load_average"]),
                    r["date"],
                ]
            )
    for path in sorted(C.RESULTS_DIR.glob("eval_throughput_fewshot*.json")):  # `--fewshot K`: long prompts, info
        r = json.loads(path.read_text())
        for res in r["results"]:
            rows.append(
                [
                    "eval_throughput.py",
                    f"same, {r['params']['fewshot']} solved problems prepended to every "
                    f"prompt (long prompts; info), batch {res['rows']}",
                    f"{res['ratio']['median_of_ratios']:.2f}x",
                    "(info)",
                    "",
                    _load_cell(res["load_average"]),
                    r["date"],
                ]
            )
    r = _load("qlora_memory")
    if r:
        if "1.5b" in r["footprints"]:
            rows.append(
                [
                    "qlora_memory.py",
                    "weights nf4 + LoRA / bf16, Qwen2.5-1.5B shape",
                    f"{r['footprints']['1.5b']['ratio']:.3f}x",
                    "<= 0.40x",
                    C.verdict(r["pass"]["footprint_1.5b"]),
                    _load_cell(r["load_average_end"]),
                    r["date"],
                ]
            )
        for key, label in (("step_peak", "no activation checkpointing"), ("step_peak_ac", "activation checkpointing")):
            if key in r.get("step_peak_ratios", {}):
                rows.append(
                    [
                        "qlora_memory.py",
                        f"GRPO training step peak RSS, QLoRA / full bf16 (fused AdamW), 0.5B shape ({label})",
                        f"{r['step_peak_ratios'][key]:.3f}x",
                        "<= 0.35x",
                        C.verdict(r["pass"][key]),
                        _load_cell(r["load_average_end"]),
                        r["date"],
                    ]
                )
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
            print(f"\n=== benchmarks/{name}.py (load average {_load_cell(C.load_average())}) ===", flush=True)
            start = time.perf_counter()
            code = subprocess.call([sys.executable, "-m", f"benchmarks.{name}"], cwd=C.ROOT)
            print(f"=== {name}: exit code {code}, {time.perf_counter() - start:.0f} s ===", flush=True)
            if code:
                failed.append(name)
    rows = summary_rows()
    table = C.markdown_table(
        ["benchmark", "measure", "value", "target", "result", "load avg (1/5/15 min)", "date"], rows
    )
    C.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (C.RESULTS_DIR / "summary.json").write_text(json.dumps({"rows": rows, "table": table}, indent=2) + "\n")
    print("\n" + table)
    if failed:
        print(f"\nbenchmarks that crashed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
