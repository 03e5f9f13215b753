"""What the harness's command lines share (``evals/passk_majk.py``, ``evals/compare.py``): the sampling flags,
their per-task defaults, and turning them into checked settings before any model is loaded.

    parser = HarnessArgumentParser(prog="passk_majk.py", description="...")
    add_harness_arguments(parser)
    args = parser.parse_args(argv)
    settings = harness_settings(args)   # task, task_id, sampling params, ks, problem limit: all validated

Bad input is a ``ValueError`` with one readable line, which :func:`grpo_ext.cli.run_cli` turns into exit code 2.
This module imports nothing heavy, so ``--help`` answers at once; the sampler and the tasks are imported when the
settings are built.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any

from grpo_ext.evaluation.cache import task_id_for
from grpo_ext.script_args import parse_task_kwargs

__all__ = [
    "CACHE_NAME",
    "GENERIC_DEFAULTS",
    "TASK_DEFAULTS",
    "HarnessArgumentParser",
    "HarnessSettings",
    "add_harness_arguments",
    "default_ks",
    "harness_settings",
    "int_list",
    "task_kwargs_flag",
]

#: Defaults sized per task so that a run without options finishes in minutes on 2 CPU cores.
TASK_DEFAULTS = {"arithmetic": {"limit": 200, "max_new_tokens": 48}}
GENERIC_DEFAULTS = {"limit": None, "max_new_tokens": 512}
#: The resumable sample cache's file name in an output folder.
CACHE_NAME = "samples.jsonl"


class HarnessArgumentParser(argparse.ArgumentParser):
    """argparse that raises ``ValueError`` instead of printing the usage and exiting, so ``run_cli`` reports a bad
    flag in one line (exit code 2) like any other bad input."""

    def error(self, message: str):
        raise ValueError(f"{message} (see --help)")


def int_list(text: str) -> list[int]:
    """argparse type of ``--k``: comma-separated integers (``1,2,4,8``)."""
    try:
        values = [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 1,2,4,8, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one k")
    return values


def default_ks(n: int) -> list[int]:
    """The powers of two below ``n``, then ``n``: the ks of DeepSeekMath's Figure 7."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return [*ks, n]


def task_kwargs_flag(text: str) -> dict:
    """``--task-kwargs`` (a JSON object) as a dict, through the training scripts' parser, with the flag's name in the
    error."""
    try:
        return parse_task_kwargs(text)
    except ValueError as err:
        cause = err.__cause__
        if isinstance(cause, json.JSONDecodeError):
            raise ValueError(f"--task-kwargs is not valid JSON ({cause.msg}): {text!r}") from None
        raise ValueError(f"--task-kwargs must be a JSON object like '{{\"max_operands\": 3}}', got {text!r}") from None


def add_harness_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The task and sampling flags every harness command line takes (the same names, defaults and meaning)."""
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
        type=int_list,
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
    parser.add_argument("--seed", type=int, default=0, help="sampling seed, the same for every model (default: 0)")
    parser.add_argument(
        "--backend",
        default="auto",
        choices=("auto", "transformers", "vllm"),
        help="auto: vLLM when installed and a GPU is present, else transformers",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


@dataclass
class HarnessSettings:
    """What :func:`harness_settings` made of the flags: everything ``evaluate_model`` needs besides a model."""

    task: Any  # a grpo_ext.tasks Task
    task_kwargs: dict
    task_id: str
    split: str
    limit: int | None
    params: Any  # a grpo_ext.evaluation.sampling.SamplingParams
    ks: list[int]


def harness_settings(args: argparse.Namespace) -> HarnessSettings:
    """The flags of :func:`add_harness_arguments`, checked: the task is built, per-task defaults filled in, and
    every k must be <= n (the command line refuses what the harness would drop with a warning)."""
    from grpo_ext.evaluation.harness import check_ks
    from grpo_ext.evaluation.sampling import SamplingParams
    from grpo_ext.tasks import get_task

    task_kwargs = task_kwargs_flag(args.task_kwargs)
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
    return HarnessSettings(
        task=task,
        task_kwargs=task_kwargs,
        task_id=task_id_for(task.name, args.split, task_kwargs),
        split=args.split,
        limit=limit,
        params=params,
        ks=ks,
    )
