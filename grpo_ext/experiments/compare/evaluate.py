"""One comparison end to end: every run evaluated with the same sampling settings, then the report written.

Results given as files are read and checked against this evaluation's settings before any sample is drawn; model
folders are evaluated into one resumable sample cache (``samples.jsonl`` in the output folder), so an interrupted
comparison resumes where it stopped.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Any

from grpo_ext.evaluation.cli import CACHE_NAME
from grpo_ext.experiments.compare.render import write_comparison
from grpo_ext.experiments.compare.runs import (
    CHECKPOINT,
    RESULTS,
    Run,
    budget_warnings,
    check_settings,
    load_results_file,
)
from grpo_ext.io import portable_path
from grpo_ext.methods.paradigm import BASE_RUN
from grpo_ext.sampler.sampling import SamplingParams

__all__ = ["CompareSettings", "compare_runs", "evaluate_runs"]


@dataclass(frozen=True)
class CompareSettings:
    """What every run of one comparison is evaluated with (the same task, problems and sampling settings), and
    where: the sample cache and the report go to ``out_dir``."""

    task: Any  # a grpo_ext.tasks Task
    problems: list[dict]
    params: SamplingParams
    ks: list[int]
    out_dir: str | Path
    _: KW_ONLY
    task_id: str
    split: str
    backend: str = "auto"
    allow_mixed_settings: bool = False
    progress: bool = True


def evaluate_runs(runs: Sequence[Run], settings: CompareSettings) -> list[str]:
    """Fill every run's ``result``; returns the warnings (mixed settings when allowed, unequal budgets).

    ``ValueError`` when a results file was evaluated with other settings (unless ``allow_mixed_settings``).
    """
    from grpo_ext.evaluation.harness import evaluate_model

    problems, params = settings.problems, settings.params

    for run in runs:
        if run.source == RESULTS:
            run.result = load_results_file(run)
    warnings: list[str] = []
    files = [r for r in runs if r.source == RESULTS]
    if files:
        # This evaluation, described as a result, is the reference the files must match.
        probe = Run(
            "this evaluation",
            BASE_RUN,
            "",
            "",
            RESULTS,
            result={
                "task_id": settings.task_id,
                "n_problems": len(problems),
                "n": params.n,
                "params": params.to_dict(),
                "params_key": params.key(),
                "per_problem": [{"problem_id": p["problem_id"]} for p in problems],
            },
        )
        warnings = check_settings([probe, *files], allow_mixed=settings.allow_mixed_settings)

    from grpo_ext.evaluation.backends import load_backend

    out = Path(settings.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for run in runs:
        if run.source != CHECKPOINT:
            continue
        model = load_backend(run.path, settings.backend)
        run.result = evaluate_model(
            model,
            settings.task,
            params,
            settings.ks,
            out / CACHE_NAME,
            problems=problems,
            task_id=settings.task_id,
            split=settings.split,
            progress=settings.progress,
        )
        del model
        gc.collect()  # one model in memory at a time
    return warnings + budget_warnings(runs)


def compare_runs(
    runs: Sequence[Run],
    settings: CompareSettings,
    *,
    command: str | None = None,
    by: Sequence[str] | None = None,
) -> dict:
    """:func:`evaluate_runs`, then the report: ``{"runs", "paths" (of the files written), "warnings"}``. ``by``: the
    attributes the report is sliced by (None: every attribute the problems carry)."""
    warnings = evaluate_runs(runs, settings)
    out = Path(settings.out_dir)
    cache = {"cache": portable_path(out / CACHE_NAME)}
    paths = write_comparison(runs, out, warnings=warnings, command=command, extra=cache, by=by)
    return {"runs": list(runs), "paths": paths, "warnings": warnings}
