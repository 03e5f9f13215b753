"""Train every method of configs/methods/ (for each seed) from the same base, then write the comparison report.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 python scripts/run_methods.py --seeds 0,1 --out results/compare
    python scripts/run_methods.py --quick --out /tmp/compare_quick        # seconds-sized smoke run (tests)

Each run trains with `python -m grpo_ext.methods --config configs/methods/<method>.yaml --seed S` (in this
process) into OUT/runs/seed<S>/<method>/, then `evals/compare.py`'s comparison (grpo_ext.methods.compare, in this
process too) evaluates the base and every run with the same sampling settings and writes OUT/report.md,
report.json, passk_majk.png and accuracy_vs_samples.png. A run whose folder already holds training_cost.json is not
trained again (--retrain to force), so an interrupted command resumes; the evaluation resumes from
OUT/samples.jsonl. Timings go to OUT/run_methods.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
METHOD_ORDER = ("sft", "rft", "online_rft", "dpo", "grpo_outcome", "grpo_process")

# --quick: every method for 2 optimizer steps on 8 train prompts; budgets stay equal (32 samples each).
QUICK_COMMON = [
    "--max_steps",
    "2",
    "--train_size",
    "8",
    "--warmup_steps",
    "0",
    "--logging_steps",
    "1",
    "--curve_every",
    "1",
    "--curve_prompts",
    "4",
    "--curve_n",
    "2",
]
QUICK = {
    "sft": ["--per_device_train_batch_size", "8", "--sample_budget", "0"],
    "rft": [
        "--per_device_train_batch_size",
        "8",
        "--samples_per_prompt",
        "4",
        "--sample_max_new_tokens",
        "32",
        "--sample_budget",
        "32",
    ],
    "dpo": [
        "--per_device_train_batch_size",
        "4",
        "--samples_per_prompt",
        "4",
        "--sample_max_new_tokens",
        "32",
        "--sample_budget",
        "32",
    ],
    "online": [
        "--per_device_train_batch_size",
        "16",
        "--num_generations",
        "4",
        "--max_completion_length",
        "32",
        "--sample_max_new_tokens",
        "32",
        "--sample_budget",
        "32",
    ],
}
QUICK_EVAL = ["--n", "4", "--k", "1,2,4", "--limit", "6", "--max-new-tokens", "32"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise ValueError(f"{message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="run_methods.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default=None, help="comma-separated training seeds (default: 0,1; --quick: 0)")
    parser.add_argument("--methods", default=",".join(METHOD_ORDER), help="comma-separated methods (default: all)")
    parser.add_argument("--model", default="embedded", help="the base every method starts from (default: embedded)")
    parser.add_argument("--configs", default=str(ROOT / "configs" / "methods"), help="folder of <method>.yaml")
    parser.add_argument("--out", default="results/compare", help="output folder (default: results/compare)")
    parser.add_argument("--n", type=int, default=64, help="evaluation samples per problem (default: 64)")
    parser.add_argument("--limit", type=int, default=200, help="evaluation problems (default: 200)")
    parser.add_argument("--quick", action="store_true", help="tiny runs and evaluation (a smoke test, seconds)")
    parser.add_argument("--retrain", action="store_true", help="train again even when a run's folder is complete")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    return parser


def method_argv(method: str, seed: int, args, run_dir: Path) -> list[str]:
    from grpo_ext.methods import get_method

    config = Path(args.configs) / f"{method}.yaml"
    if not config.is_file():
        raise FileNotFoundError(f"method {method!r}: no config {config}")
    argv = [
        "--config",
        str(config),
        "--seed",
        str(seed),
        "--output_dir",
        str(run_dir),
        "--model_name_or_path",
        args.model,
    ]
    if args.no_progress or args.quick:
        argv += ["--disable_tqdm", "true"]
    if args.quick:
        runner = get_method(method).runner
        argv += QUICK_COMMON + QUICK["online" if runner == "online" else runner]
    return argv


def main(argv: list[str]) -> dict:
    args = build_parser().parse_args(argv)
    from grpo_ext.io import atomic_write_json
    from grpo_ext.methods import get_method, run_method
    from grpo_ext.methods.compare.cli import COMMAND
    from grpo_ext.methods.compare.cli import main as compare
    from grpo_ext.methods.cost import COST_FILE
    from grpo_ext.models import resolve_model_path

    seeds_text = args.seeds if args.seeds is not None else ("0" if args.quick else "0,1")
    try:
        seeds = [int(s) for s in seeds_text.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"--seeds: expected comma-separated integers, got {seeds_text!r}") from None
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for method in methods:
        get_method(method)  # unknown -> one line naming the known ones
    if not seeds or not methods:
        raise ValueError("nothing to run: give at least one seed and one method")
    resolve_model_path(args.model)  # a missing base model fails before any training

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    runs = [f"base={args.model}"]
    for seed in seeds:
        for method in methods:
            run_dir = out / "runs" / f"seed{seed}" / method
            name = f"{method}@seed{seed}"
            runs.append(f"{name}={run_dir}")
            if (run_dir / COST_FILE).is_file() and not args.retrain:
                print(f"{name}: already trained in {run_dir} (--retrain to train again)")
                continue
            t0 = time.perf_counter()
            print(f"=== {name}: training into {run_dir}", flush=True)
            run_method(method_argv(method, seed, args, run_dir))
            timings[name] = round(time.perf_counter() - t0, 1)
    train_done = time.perf_counter()

    compare_argv = [arg for run in runs for arg in ("--run", run)] + ["--out", str(out)]
    compare_argv += QUICK_EVAL if args.quick else ["--n", str(args.n), "--limit", str(args.limit)]
    if args.no_progress or args.quick:
        compare_argv.append("--no-progress")
    result = compare(compare_argv)
    end = time.perf_counter()
    record = {
        "seeds": seeds,
        "methods": methods,
        "model": args.model,
        "quick": args.quick,
        "train_seconds": round(train_done - start, 1),
        "evaluate_seconds": round(end - train_done, 1),
        "total_seconds": round(end - start, 1),
        "per_run_seconds": timings,
        "compare_command": f"{COMMAND} " + " ".join(compare_argv),
    }
    atomic_write_json(out / "run_methods.json", record)
    print(
        f"total {record['total_seconds']} s (training {record['train_seconds']} s, evaluation "
        f"{record['evaluate_seconds']} s)"
    )
    return {**result, "record": record}


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    from grpo_ext.cli import run_cli

    run_cli(main, sys.argv[1:])
