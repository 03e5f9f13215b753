"""What the harness's command lines share (``evals/passk_majk.py``, ``evals/compare.py``): the sampling flags,
their per-task defaults (each task's ``harness_defaults``), and turning them into checked settings before any model
is loaded.

    parser = HarnessArgumentParser(prog="passk_majk.py", description="...")
    add_harness_arguments(parser)
    args = parser.parse_args(argv)
    settings = harness_settings(args)   # task, task_id, sampling params, ks, problem limit: all validated

Bad input is a ``UserError`` with one readable line, which :func:`grpo_ext.cli.run_cli` turns into exit code 2.
This module imports nothing heavy, so ``--help`` answers at once; the sampler and the tasks are imported when the
settings are built.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any

from grpo_ext.errors import UserError, user_input
from grpo_ext.evaluation.cache import task_id_for
from grpo_ext.validation import check_number

__all__ = [
    "CACHE_NAME",
    "DECODE_BUDGET",
    "HarnessArgumentParser",
    "HarnessSettings",
    "ReportSettings",
    "add_harness_arguments",
    "add_report_arguments",
    "float_list",
    "harness_settings",
    "int_list",
    "report_settings",
    "json_object_flag",
    "task_kwargs_flag",
]

#: Default --batch-size x n stays within this many samples (n > 64): the transformers sampler's KV cache has
#: batch_size x n slots, so its memory is proportional to that product (measured on the embedded model, 20 prompts,
#: n = 1024: peak RSS 2.9 GB at 8 x 1024 slots, 0.8 GB at 1 x 1024), while samples do not depend on it.
DECODE_BUDGET = 512
#: The resumable sample cache's file name in an output folder.
CACHE_NAME = "samples.jsonl"


class HarnessArgumentParser(argparse.ArgumentParser):
    """argparse that raises ``UserError`` instead of printing the usage and exiting, so ``run_cli`` reports a bad
    flag in one line (exit code 2) like any other bad input; an abbreviated flag is refused, not taken for the full
    name (``--temp`` is not ``--temperature``)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        raise UserError(f"{message} (see --help)")


def _comma_list(text: str, number, example: str, kind: str, empty: str) -> list:
    try:
        values = [number(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated {kind} like {example}, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError(empty)
    return values


def int_list(text: str) -> list[int]:
    """argparse type of ``--k``: comma-separated integers (``1,2,4,8``)."""
    return _comma_list(text, int, "1,2,4,8", "integers", "expected at least one k")


def float_list(text: str) -> list[float]:
    """argparse type of ``--tau``: comma-separated numbers (``0.1,0.5,0.9``)."""
    return _comma_list(text, float, "0.1,0.5,0.9", "numbers", "expected at least one number")


def json_object_flag(flag: str, text: str, example: str = '{"max_operands": 3}') -> dict:
    """A flag's JSON object (``--task-kwargs``, ``--model-kwargs``) as a dict; a `UserError` naming the flag when the
    text is not JSON or not an object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(f"{flag} is not valid JSON ({err.msg}): {text!r}") from None
    if not isinstance(value, dict):
        raise UserError(f"{flag} must be a JSON object like '{example}', got {text!r}")
    return value


def task_kwargs_flag(text: str) -> dict:
    """``--task-kwargs`` (a JSON object) as a dict, with the flag's name in the error."""
    return json_object_flag("--task-kwargs", text)


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
    parser.add_argument(
        "--decode",
        choices=("auto", "eager", "static", "compiled"),
        default="auto",
        help="decode step of the transformers backend: auto = compiled fixed-shape step on CUDA, eager elsewhere "
        "(samples do not depend on it; default: auto)",
    )
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help="default: the task's (48 for arithmetic, 64 for word_arithmetic, 512 unless a task says otherwise)",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="prompts per generation batch (each expanded to n samples; default: 8, fewer when n > 64 so that at "
        f"most {DECODE_BUDGET} samples decode at once, since the sampler's memory grows with batch size x n)",
    )
    parser.add_argument(
        "--limit",
        type=int,
        default=None,
        help="evaluate the first L problems (default: the task's: 200 for arithmetic, 500 for word_arithmetic, all "
        "unless a task says otherwise)",
    )
    parser.add_argument("--seed", type=int, default=0, help="sampling seed, the same for every model (default: 0)")
    parser.add_argument(
        "--backend",
        default="auto",
        choices=("auto", "transformers", "vllm"),
        help="auto: vLLM when installed and a GPU is present, else transformers",
    )
    parser.add_argument(
        "--stop",
        action="append",
        default=None,
        metavar="TEXT",
        help="stop string (repeat for several): a sample ends before its first occurrence, as lm-eval's 'until' cuts "
        "it; 'none' for no stop strings (default: the task's, e.g. a new 'Question:' for GSM8K-format prompts)",
    )
    parser.add_argument(
        "--by",
        action="append",
        default=None,
        metavar="ATTR",
        help="slice the report by this problem attribute (repeat for several): every metric per value, with its "
        "interval, and paired differences for two models; 'none' for no slices (default: the task's, e.g. "
        "operation, operands and carry_borrow for arithmetic)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def _none_or_list(flag: str, values: list[str] | None, default: tuple[str, ...]) -> tuple[str, ...]:
    """A repeatable flag's values: the default when not given, () for a lone 'none'; an empty value is an error."""
    if values is None:
        return tuple(default)
    if values == ["none"]:
        return ()
    if "none" in values:
        raise UserError(f"{flag} none means no {flag[2:]} at all: give it alone, not with {flag} {values[0]!r}")
    if any(not v for v in values):
        raise UserError(f"{flag} needs a non-empty value (or 'none')")
    return tuple(dict.fromkeys(values))


@dataclass
class HarnessSettings:
    """What :func:`harness_settings` made of the flags: everything ``evaluate_model`` needs besides a model."""

    task: Any  # a grpo_ext.tasks Task
    task_kwargs: dict
    task_id: str
    split: str
    limit: int | None
    params: Any  # a grpo_ext.sampler.sampling.SamplingParams
    ks: list[int]
    by: tuple[str, ...] = ()  # the attributes the report is sliced by (--by)


def harness_settings(args: argparse.Namespace) -> HarnessSettings:
    """The flags of :func:`add_harness_arguments`, checked: the task is built, its defaults filled in, and
    every k must be <= n (the command line refuses what the harness would drop with a warning), every --by an
    attribute the task declares."""
    from grpo_ext.evaluation.harness import check_ks
    from grpo_ext.evaluation.registry import default_ks
    from grpo_ext.evaluation.slices import check_by
    from grpo_ext.sampler.sampling import SamplingParams
    from grpo_ext.tasks import get_task

    task_kwargs = task_kwargs_flag(args.task_kwargs)
    with user_input(None):  # an unknown task or a bad knob names itself
        task = get_task(args.task, **task_kwargs)
    defaults = task.harness_defaults  # the task owns them: a task without its own gets the base Task's
    limit = args.limit if args.limit is not None else defaults.limit
    max_new_tokens = args.max_new_tokens if args.max_new_tokens is not None else defaults.max_new_tokens
    if args.n < 1:
        raise UserError(f"--n must be >= 1, got {args.n}")
    # Finite, and a seed NumPy and torch both take (SamplingParams would let inf and -1 through).
    check_number("--temperature", args.temperature, low=0)
    check_number("--seed", args.seed, low=0, high=2**32 - 1, integer=True)
    batch_size = args.batch_size if args.batch_size is not None else max(1, min(8, DECODE_BUDGET // args.n))
    ks = args.k if args.k is not None else default_ks(args.n)
    with user_input("--k"):
        _, too_big = check_ks(ks, args.n)
    if too_big:
        raise UserError(
            f"--k {','.join(map(str, too_big))} exceeds --n {args.n}: pass@k and maj@k need k <= n samples per "
            f"problem; raise --n or drop those k"
        )
    stop = _none_or_list("--stop", getattr(args, "stop", None), task.stop_strings)
    by = check_by(_none_or_list("--by", getattr(args, "by", None), task.slice_attributes), task.slice_attributes)
    with user_input(None):  # SamplingParams names the field (temperature, top_p, ...)
        params = SamplingParams(
            n=args.n,
            temperature=args.temperature,
            top_p=args.top_p,
            decode=args.decode,
            max_new_tokens=max_new_tokens,
            seed=args.seed,
            batch_size=batch_size,
            stop=stop,
        )
    return HarnessSettings(
        task=task,
        task_kwargs=task_kwargs,
        task_id=task_id_for(task.name, args.split, task_kwargs),
        split=args.split,
        limit=limit,
        params=params,
        ks=ks,
        by=by,
    )


def add_report_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The flags of what a report computes from the samples (no resampling of samples: only of problems)."""
    parser.add_argument(
        "--tau",
        type=float_list,
        default=None,
        metavar="T1,T2,...",
        help="Cover@tau thresholds in [0, 1]: share of problems with at least a fraction tau of right samples "
        "(default: 0.1,0.5,0.9)",
    )
    parser.add_argument(
        "--bootstrap-resamples",
        type=int,
        default=10_000,
        help="resamples of the problems behind every 95%% interval (default: 10000)",
    )
    parser.add_argument(
        "--bootstrap-seed", type=int, default=0, help="seed of those resamples, recorded in the report (default: 0)"
    )
    parser.add_argument(
        "--solved-threshold",
        type=float,
        default=None,
        help="a model solves a problem at k when its pass@k is >= this, for the solved-set overlap (default: 0.5)",
    )
    return parser


@dataclass
class ReportSettings:
    """What :func:`report_settings` made of the report flags."""

    taus: list[float]
    bootstrap: Any  # a grpo_ext.evaluation.analysis.BootstrapSettings
    solved_threshold: float


def report_settings(args: argparse.Namespace) -> ReportSettings:
    """The flags of :func:`add_report_arguments`, checked (errors name the flag)."""
    from grpo_ext.evaluation.analysis import SOLVED_THRESHOLD, BootstrapSettings
    from grpo_ext.evaluation.bootstrap import MAX_RESAMPLES
    from grpo_ext.evaluation.scoring import DEFAULT_TAUS, check_taus

    try:
        taus = check_taus(args.tau if args.tau is not None else DEFAULT_TAUS)
    except ValueError as err:
        raise UserError(f"--tau: {err}") from None
    if args.bootstrap_resamples < 1:
        raise UserError(f"--bootstrap-resamples must be >= 1, got {args.bootstrap_resamples}")
    if args.bootstrap_resamples > MAX_RESAMPLES:
        raise UserError(
            f"--bootstrap-resamples must be <= {MAX_RESAMPLES} (the default 10000 settles a 95% interval), got "
            f"{args.bootstrap_resamples}"
        )
    if args.bootstrap_seed < 0:
        raise UserError(f"--bootstrap-seed must be >= 0, got {args.bootstrap_seed}")
    threshold = SOLVED_THRESHOLD if args.solved_threshold is None else args.solved_threshold
    if not 0.0 < threshold <= 1.0:
        raise UserError(f"--solved-threshold must be in (0, 1] (a pass@k), got {threshold}")
    bootstrap = BootstrapSettings(n_resamples=args.bootstrap_resamples, seed=args.bootstrap_seed)
    return ReportSettings(taus=taus, bootstrap=bootstrap, solved_threshold=threshold)
