"""Pass@K vs Maj@K of one or more models on a verifiable task (DeepSeekMath, Figure 7).

    python evals/passk_majk.py                                   # the embedded model on the arithmetic task
    python evals/passk_majk.py --model embedded --model outputs/qlora --n 64 --k 1,2,4,8,16,32,64 --out runs/cmp
    python evals/passk_majk.py --model Qwen/Qwen2.5-Math-1.5B-Instruct --task gsm8k --n 64 --backend vllm

Writes into --out: report.md (tables), report.json (every number, per problem too), passk_majk.png (Pass@K
solid, Maj@K dashed, one colour per model) and samples.jsonl, the resumable sample cache: run the same command
again after a crash and only the missing samples are drawn; change --k, or the task's answer checker, and the
report is recomputed from the cached samples without sampling. Bad input ends with one line and exit code 2
(--debug shows the traceback).
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

#: Defaults sized per task so that a run without options finishes in minutes on 2 CPU cores.
TASK_DEFAULTS = {"arithmetic": {"limit": 200, "max_new_tokens": 48}}
GENERIC_DEFAULTS = {"limit": None, "max_new_tokens": 512}
CACHE_NAME = "samples.jsonl"


def _int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 1,2,4,8, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one k")
    return values


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage, so `run_cli` reports bad flags in one line (exit 2)."""

    def error(self, message: str):
        raise ValueError(f"{message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="passk_majk.py",
        description="Pass@K vs Maj@K of one or more models on a verifiable task (report.md, report.json, "
        "passk_majk.png and a resumable sample cache in --out).",
    )
    parser.add_argument(
        "--model",
        action="append",
        default=None,
        metavar="PATH",
        help="model folder, PEFT adapter folder, 'embedded' or hub id; repeat to compare (default: embedded)",
    )
    parser.add_argument("--task", default="arithmetic", help="registered task name (default: arithmetic)")
    parser.add_argument(
        "--task-kwargs",
        default="{}",
        metavar="JSON",
        help="the task's knobs as a JSON object, e.g. '{\"max_operands\": 3}'",
    )
    parser.add_argument("--split", default="test", help="dataset split (default: test)")
    parser.add_argument("--n", type=int, default=64, help="samples per problem (default: 64)")
    parser.add_argument(
        "--k",
        type=_int_list,
        default=None,
        metavar="K1,K2,...",
        help="k values, each <= n (default: the powers of two up to n, and n)",
    )
    parser.add_argument("--temperature", type=float, default=0.7, help="default: 0.7 (DeepSeekMath's setting)")
    parser.add_argument("--top-p", type=float, default=1.0, help="default: 1.0")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: 48 for arithmetic, 512 otherwise")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=8,
        help="prompts per generation batch (each expanded to n samples; default: 8)",
    )
    parser.add_argument(
        "--limit",
        type=int,
        default=None,
        help="evaluate the first L problems (default: 200 for arithmetic, all otherwise)",
    )
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default: 0)")
    parser.add_argument(
        "--backend",
        default="auto",
        choices=("auto", "transformers", "vllm"),
        help="auto: vLLM when installed and a GPU is present, else transformers",
    )
    parser.add_argument("--trust-remote-code", action="store_true", help="allow model code from the model folder")
    parser.add_argument(
        "--out", default="outputs/passk_majk", metavar="DIR", help="output folder (default: outputs/passk_majk)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    return parser


def default_ks(n: int) -> list[int]:
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return [*ks, n]


def parse_task_kwargs(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"--task-kwargs is not valid JSON ({err.msg}): {text!r}") from None
    if not isinstance(value, dict):
        raise ValueError(f"--task-kwargs must be a JSON object like '{{\"max_operands\": 3}}', got {text!r}")
    return value


def main(argv: list[str]) -> dict:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    # Everything the user typed is checked before any model is loaded or any sample drawn.
    from grpo_ext.evaluation.harness import check_ks, evaluate_model, load_problems
    from grpo_ext.evaluation.report import write_reports
    from grpo_ext.evaluation.sampling import SamplingParams
    from grpo_ext.models import resolve_model_path
    from grpo_ext.tasks import get_task

    task_kwargs = parse_task_kwargs(args.task_kwargs)
    task = get_task(args.task, **task_kwargs)
    defaults = TASK_DEFAULTS.get(args.task, GENERIC_DEFAULTS)
    limit = args.limit if args.limit is not None else defaults["limit"]
    max_new_tokens = args.max_new_tokens if args.max_new_tokens is not None else defaults["max_new_tokens"]
    if args.n < 1:
        raise ValueError(f"--n must be >= 1, got {args.n}")
    ks = args.k if args.k is not None else default_ks(args.n)
    _, too_big = check_ks(ks, args.n)
    if too_big:
        raise ValueError(
            f"--k {','.join(map(str, too_big))} exceeds --n {args.n}: pass@k and maj@k need k <= n samples per "
            f"problem; raise --n or drop those k"
        )
    params = SamplingParams(
        n=args.n,
        temperature=args.temperature,
        top_p=args.top_p,
        max_new_tokens=max_new_tokens,
        seed=args.seed,
        batch_size=args.batch_size,
    )
    from grpo_ext.evaluation.backends import BackendUnavailableError, load_backend, vllm_available

    if args.backend == "vllm" and not vllm_available():
        raise BackendUnavailableError("--backend vllm: vllm is not installed here (use --backend transformers)")
    problems = load_problems(task, args.split, limit)
    models = args.model or ["embedded"]
    if len(set(models)) != len(models):
        raise ValueError(f"--model given twice: {models}")
    for model in models:
        resolve_model_path(model)  # a missing folder fails here, before the first model is loaded
    task_id = f"{task.name}/{args.split}" + (f" {json.dumps(task_kwargs, sort_keys=True)}" if task_kwargs else "")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for model in models:
        backend = load_backend(model, args.backend, trust_remote_code=args.trust_remote_code)
        result = evaluate_model(
            backend,
            task,
            params,
            ks,
            out / CACHE_NAME,
            problems=problems,
            task_id=task_id,
            split=args.split,
            progress=not args.no_progress,
        )
        results.append(result)
        del backend
        gc.collect()
    command = "python evals/passk_majk.py " + shlex.join(argv)
    paths = write_reports(results, out, command=command.strip(), extra={"cache": str(out / CACHE_NAME)})

    for r in results:
        cells = "  ".join(f"k={k}: pass {r['pass@k'][str(k)]:.3f} maj {r['maj@k'][str(k)]:.3f}" for k in r["ks"])
        print(f"{r['model']}: mean accuracy {r['mean_accuracy']:.3f}  {cells}")
    print("wrote " + ", ".join(str(p) for p in (*paths.values(), out / CACHE_NAME)))
    return {"results": results, "paths": paths}


if __name__ == "__main__":
    run_cli(main, sys.argv[1:])
