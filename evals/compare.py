"""SFT, RFT, online RFT, DPO and GRPO under DeepSeekMath's unified paradigm: one report for many trained runs.

    python evals/compare.py --run base=embedded --run rft@seed0=outputs/methods/seed0/rft \\
        --run grpo_outcome@seed0=outputs/methods/seed0/grpo_outcome ... --task arithmetic --n 64 --out results/compare

``--run NAME=CHECKPOINT``: NAME is a method (sft, rft, online_rft, dpo, grpo_outcome, grpo_process) or ``base``
(the starting model), optionally ``@LABEL`` (a seed: runs of one method with different labels are repeats, runs
of different methods with the same label are paired). CHECKPOINT is a model folder (``training_cost.json`` and
``learning_curve.json`` written by the method runners are read from it) or a JSON file of evaluation results.

Writes into --out: report.md (the paradigm table generated from grpo_ext.methods.METHODS beside each method's
pass@1, maj@k, pass@k and training cost, and the paper's four findings with a verdict), report.json (every
number), passk_majk.png (Pass@K and Maj@K per method), accuracy_vs_samples.png (learning curves against
training samples; final pass@1 against samples generated) and samples.jsonl (the resumable sample cache).
Every run is evaluated with the same sampling settings; results evaluated otherwise are refused unless
--allow-mixed-settings, which reports them under a warning. Bad input ends with one line and exit code 2.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import shlex
import sys
from pathlib import Path

from grpo_ext.cli import run_cli

TASK_DEFAULTS = {"arithmetic": {"limit": 200, "max_new_tokens": 48}}
GENERIC_DEFAULTS = {"limit": None, "max_new_tokens": 512}
CACHE_NAME = "samples.jsonl"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise ValueError(f"{message} (see --help)")


def _int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 1,4,16,64, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one k")
    return values


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="compare.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="append", default=[], metavar="NAME=CHECKPOINT",
                        help="a run to compare (repeat): METHOD[@LABEL]=model folder or results .json")
    parser.add_argument("--task", default="arithmetic", help="registered task name (default: arithmetic)")
    parser.add_argument("--task-kwargs", default="{}", metavar="JSON", help="the task's knobs as a JSON object")
    parser.add_argument("--split", default="test", help="dataset split (default: test)")
    parser.add_argument("--n", type=int, default=64, help="samples per problem (default: 64)")
    parser.add_argument("--k", type=_int_list, default=None, metavar="K1,K2,...",
                        help="k values, each <= n (default: the powers of two up to n, and n)")
    parser.add_argument("--temperature", type=float, default=0.7, help="default: 0.7 (DeepSeekMath's setting)")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: 48 for arithmetic, 512 otherwise")
    parser.add_argument("--batch-size", type=int, default=8, help="prompts per generation batch (default: 8)")
    parser.add_argument("--limit", type=int, default=None,
                        help="evaluate the first L problems (default: 200 for arithmetic, all otherwise)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed, the same for every run (default: 0)")
    parser.add_argument("--backend", default="auto", choices=("auto", "transformers", "vllm"))
    parser.add_argument("--tolerance", type=float, default=None,
                        help="margin (pass@1 points) a finding must clear in every seed (default: 0.01)")
    parser.add_argument("--allow-mixed-settings", action="store_true",
                        help="report runs evaluated with different settings (flagged) instead of refusing them")
    parser.add_argument("--out", default="outputs/compare", metavar="DIR", help="output folder")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def default_ks(n: int) -> list[int]:
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return [*ks, n]


def main(argv: list[str]) -> dict:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    from grpo_ext.evaluation.harness import check_ks, evaluate_model, load_problems
    from grpo_ext.evaluation.sampling import SamplingParams
    from grpo_ext.methods.comparison import (
        DEFAULT_TOLERANCE,
        Run,
        budget_warnings,
        check_settings,
        load_results_file,
        parse_runs,
        write_comparison,
    )
    from grpo_ext.tasks import get_task

    # Everything the user typed is checked before a model is loaded or a sample drawn.
    try:
        task_kwargs = json.loads(args.task_kwargs)
    except json.JSONDecodeError as err:
        raise ValueError(f"--task-kwargs is not valid JSON ({err.msg}): {args.task_kwargs!r}") from None
    if not isinstance(task_kwargs, dict):
        raise ValueError(f"--task-kwargs must be a JSON object, got {args.task_kwargs!r}")
    runs = parse_runs(args.run)
    task = get_task(args.task, **task_kwargs)
    defaults = TASK_DEFAULTS.get(args.task, GENERIC_DEFAULTS)
    limit = args.limit if args.limit is not None else defaults["limit"]
    max_new_tokens = args.max_new_tokens if args.max_new_tokens is not None else defaults["max_new_tokens"]
    if args.n < 1:
        raise ValueError(f"--n must be >= 1, got {args.n}")
    ks = args.k if args.k is not None else default_ks(args.n)
    _, too_big = check_ks(ks, args.n)
    if too_big:
        raise ValueError(f"--k {','.join(map(str, too_big))} exceeds --n {args.n}: raise --n or drop those k")
    if 1 not in ks:
        ks = [1, *ks]  # pass@1 is the headline number
    tolerance = DEFAULT_TOLERANCE if args.tolerance is None else args.tolerance
    if tolerance < 0:
        raise ValueError(f"--tolerance must be >= 0, got {tolerance}")
    params = SamplingParams(n=args.n, temperature=args.temperature, top_p=args.top_p, max_new_tokens=max_new_tokens,
                            seed=args.seed, batch_size=args.batch_size)
    problems = load_problems(task, args.split, limit)
    task_id = f"{task.name}/{args.split}" + (f" {json.dumps(task_kwargs, sort_keys=True)}" if task_kwargs else "")
    for run in runs:
        if run.kind == "results":
            run.result = load_results_file(run)
    # Results given as files must match the settings of this evaluation (checked before any sampling is spent).
    warnings: list[str] = []
    files = [r for r in runs if r.kind == "results"]
    if files:
        probe = Run("this evaluation", "base", "", "", "results", result={
            "task_id": task_id, "n_problems": len(problems), "n": args.n, "params": params.to_dict(),
            "params_key": params.key(), "per_problem": [{"problem_id": p["problem_id"]} for p in problems]})
        warnings = check_settings([probe, *files], allow_mixed=args.allow_mixed_settings)

    from grpo_ext.evaluation.backends import load_backend

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for run in runs:
        if run.kind != "checkpoint":
            continue
        backend = load_backend(run.path, args.backend)
        run.result = evaluate_model(backend, task, params, ks, out / CACHE_NAME, problems=problems, task_id=task_id,
                                    split=args.split, progress=not args.no_progress)
        del backend
        gc.collect()
    warnings += budget_warnings(runs)
    command = "python evals/compare.py " + shlex.join(argv)
    paths = write_comparison(runs, out, warnings=warnings, command=command.strip(), tolerance=tolerance,
                             extra={"cache": str(out / CACHE_NAME)})
    for run in runs:
        r = run.result
        k = r["ks"][-1]
        print(f"{run.name}: pass@1 {r['pass@k']['1']:.3f}  maj@{k} {r['maj@k'][str(k)]:.3f}  "
              f"pass@{k} {r['pass@k'][str(k)]:.3f}")
    for w in warnings:
        print(f"warning: {w}")
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return {"runs": runs, "paths": paths, "warnings": warnings}


if __name__ == "__main__":
    run_cli(main, sys.argv[1:])
