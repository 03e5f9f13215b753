"""The comparison's command line: ``evals/compare.py`` is this parser and :func:`main`, and ``scripts/run_methods.py``
calls :func:`main` with the flags it records, so the report names the command that reproduces it.

The task and sampling flags are the harness's (:mod:`grpo_ext.evaluation.cli`). Everything the user typed is checked
before a model is loaded or a sample drawn; bad input raises ``ValueError`` / ``FileNotFoundError`` with one line
naming the flag (``grpo_ext.cli.run_cli`` turns it into exit code 2).
"""

from __future__ import annotations

import logging
import shlex

from grpo_ext.evaluation.cli import HarnessArgumentParser, add_harness_arguments

__all__ = ["COMMAND", "build_parser", "main"]

#: How the report and ``run_methods.json`` spell the command that reproduces a comparison.
COMMAND = "python evals/compare.py"


def build_parser() -> HarnessArgumentParser:
    parser = HarnessArgumentParser(
        prog="compare.py",
        description="SFT, RFT, online RFT, DPO and GRPO under DeepSeekMath's unified paradigm: one report for many "
        "trained runs.",
    )
    parser.add_argument(
        "--run",
        action="append",
        default=[],
        metavar="NAME=CHECKPOINT",
        help="a run to compare (repeat): METHOD[@LABEL]=model folder or results .json",
    )
    add_harness_arguments(parser)
    parser.add_argument(
        "--allow-mixed-settings",
        action="store_true",
        help="report runs evaluated with different settings (flagged) instead of refusing them",
    )
    parser.add_argument(
        "--allow-unfinished",
        action="store_true",
        help="compare a checkpoint whose training run did not finish (grpo_ext_run.json: running or failed), with a "
        "warning (default: refused)",
    )
    parser.add_argument("--out", default="outputs/compare", metavar="DIR", help="output folder")
    return parser


def main(argv: list[str]) -> dict:
    """Parse ``argv`` (``evals/compare.py``'s flags), compare the runs, print one line per run; returns
    :func:`grpo_ext.experiments.compare.evaluate.compare_runs`' result."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    from grpo_ext.evaluation.cli import harness_settings
    from grpo_ext.evaluation.harness import load_problems
    from grpo_ext.evaluation.results import EvalResult
    from grpo_ext.experiments.compare.evaluate import CompareSettings, compare_runs
    from grpo_ext.experiments.compare.runs import parse_runs
    from grpo_ext.experiments.study.stats import headline_metrics

    runs = parse_runs(args.run, allow_unfinished=args.allow_unfinished)
    settings = harness_settings(args)
    ks = settings.ks if 1 in settings.ks else [1, *settings.ks]  # pass@1 is the headline number
    problems = load_problems(settings.task, settings.split, settings.limit)

    compare = CompareSettings(
        settings.task,
        problems,
        settings.params,
        ks,
        args.out,
        task_id=settings.task_id,
        split=settings.split,
        backend=args.backend,
        allow_mixed_settings=args.allow_mixed_settings,
        progress=not args.no_progress,
    )
    result = compare_runs(runs, compare, command=f"{COMMAND} {shlex.join(argv)}".strip(), by=settings.by)
    for run in runs:
        read = EvalResult.of(run.result)
        numbers = "  ".join(f"{name} {read.value(name):.3f}" for name in headline_metrics(read.ks[-1]))
        print(f"{run.name}: {numbers}")
    for w in result["warnings"]:
        print(f"warning: {w}")
    print("wrote " + ", ".join(str(p) for p in result["paths"].values()))
    return result
