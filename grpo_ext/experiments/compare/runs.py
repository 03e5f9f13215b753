"""The runs of a comparison: ``--run NAME=PATH`` parsed and checked, their files read, their settings matched.

A *run* is ``NAME=PATH``: ``NAME`` is a method of :data:`grpo_ext.methods.METHODS` (or ``base``, the starting
checkpoint) optionally followed by ``@LABEL`` (``grpo_outcome@seed1``); runs of one method with different labels
are its repeats (seeds), and runs of different methods with the same label are paired. ``PATH`` is a model folder
(evaluated by the comparison, its ``training_cost.json``, ``learning_curve.json`` and ``method_run.json`` read when
present) or a JSON file of evaluation results (``evals/passk_majk.py``'s ``report.json`` with one model, or one
:func:`grpo_ext.evaluation.harness.evaluate_model` result).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from grpo_ext.errors import UserError
from grpo_ext.evaluation.registry import headline_entries
from grpo_ext.methods.cost import COST_FILE, CURVE_FILE, RUN_FILE, read_json_file
from grpo_ext.methods.paradigm import BASE_RUN, METHODS, get_method

__all__ = [
    "CHECKPOINT",
    "RESULTS",
    "Run",
    "budget_warnings",
    "check_settings",
    "load_results_file",
    "parse_run",
    "parse_runs",
    "settings_of",
]

#: ``Run.source``: the path is a model folder, evaluated by the comparison.
CHECKPOINT = "checkpoint"
#: ``Run.source``: the path is a JSON file of evaluation results, read as they are.
RESULTS = "results"
#: What a results file must hold to be compared.
RESULT_KEYS = (*(m.name for m in headline_entries()), "ks", "n", "params", "task_id", "n_problems")


@dataclass
class Run:
    """One ``--run NAME=PATH``."""

    name: str
    method: str  # a METHODS key or BASE_RUN
    label: str  # "" when the name has no @LABEL
    path: str
    source: str  # CHECKPOINT or RESULTS: what PATH holds
    result: dict | None = None
    cost: dict | None = None
    curve: dict | None = None
    trained_as: str | None = None
    flags: list[str] = field(default_factory=list)

    def to_dict(self, per_problem: bool = True) -> dict:
        result = dict(self.result or {})
        result.pop("excerpt", None)  # the samples have their own file (samples_excerpt.jsonl)
        if not per_problem:
            result.pop("per_problem", None)
        return {
            "name": self.name,
            "method": self.method,
            "label": self.label,
            "path": self.path,
            "source": self.source,
            "trained_as": self.trained_as,
            "cost": self.cost,
            "curve": self.curve,
            "flags": self.flags,
            "result": result,
        }


def parse_run(spec: str) -> Run:
    """``NAME=PATH`` -> :class:`Run` (the path is checked, nothing is loaded). Errors name the spec."""
    from grpo_ext.model_paths import EMBEDDED_NAME, resolve_model_path

    if "=" not in spec:
        raise UserError(f"--run {spec!r}: expected NAME=CHECKPOINT (e.g. grpo_outcome@seed0=outputs/grpo_outcome)")
    name, path = (part.strip() for part in spec.split("=", 1))
    if not name or not path:
        raise UserError(f"--run {spec!r}: expected NAME=CHECKPOINT with both parts non-empty")
    method, _, label = name.partition("@")
    if method != BASE_RUN and method not in METHODS:
        raise UserError(
            f"--run {spec!r}: unknown method {method!r}; known: {BASE_RUN} (the starting model), {', '.join(METHODS)} "
            f"(optionally NAME@LABEL, e.g. rft@seed1)"
        )
    if path.endswith(".json"):
        if not Path(path).is_file():
            raise FileNotFoundError(f"--run {name}: results file {path} does not exist")
        return Run(name, method, label, path, RESULTS)
    if path != EMBEDDED_NAME and not Path(path).expanduser().exists():
        raise FileNotFoundError(f"--run {name}: checkpoint {path} does not exist")
    try:
        resolve_model_path(path)
    except FileNotFoundError as err:
        raise FileNotFoundError(f"--run {name}: {err}") from None
    return Run(name, method, label, path, CHECKPOINT)


def parse_runs(specs: Sequence[str], *, allow_unfinished: bool = False) -> list[Run]:
    """Every ``--run``, checked; a checkpoint folder's training records are read (and its method checked). One
    checkpoint under two names (however its path is spelt) would count one model twice, and a checkpoint whose run
    did not finish is refused unless ``allow_unfinished`` (`grpo_ext.evaluation.models_given`)."""
    from grpo_ext.evaluation.models_given import model_identity, unfinished_run

    if not specs:
        raise UserError("no runs: give at least one --run NAME=CHECKPOINT")
    runs = [parse_run(s) for s in specs]
    names = [r.name for r in runs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise UserError(f"--run names must be unique; repeated: {', '.join(duplicates)} (use NAME@LABEL)")
    seen: dict[str, str] = {}
    for run in (r for r in runs if r.source == CHECKPOINT):
        identity = model_identity(run.path)
        if identity in seen:
            raise UserError(
                f"--run {run.name} and --run {seen[identity]} are the same checkpoint ({identity}): one model would "
                "be counted twice; give each checkpoint once"
            )
        seen[identity] = run.name
        message = unfinished_run(f"--run {run.name}", identity)
        if message and not allow_unfinished:
            raise UserError(f"{message}; compare one of its checkpoint-N folders, or pass --allow-unfinished")
        if message:
            print(f"warning: {message}: compared anyway (--allow-unfinished)", file=sys.stderr, flush=True)
    for run in runs:
        if run.source == CHECKPOINT and Path(run.path).is_dir():
            record = read_json_file(run.path, RUN_FILE)
            run.trained_as = ((record or {}).get("method") or {}).get("name")
            if run.trained_as and run.method != BASE_RUN and run.trained_as != run.method:
                raise UserError(
                    f"--run {run.name}: {run.path} was trained as {run.trained_as!r}, not {run.method!r} "
                    f"(see {RUN_FILE})"
                )
            run.cost = read_json_file(run.path, COST_FILE)
            run.curve = read_json_file(run.path, CURVE_FILE)
    return runs


def load_results_file(run: Run) -> dict:
    """The one evaluation result in a results JSON (an ``evaluate_model`` dict or a report with one model), read
    by the harness's reader; its training cost, when it carries one, becomes the run's."""
    from grpo_ext.evaluation.report import read_report

    try:
        data = read_report(run.path, require=RESULT_KEYS)
    except ValueError as err:
        raise UserError(f"--run {run.name}: {err}") from None
    if "params_key" not in data:
        raise UserError(f"--run {run.name}: {run.path}: its params do not name the sampling settings")
    if "training_cost" in data and run.cost is None:
        run.cost = data["training_cost"]
    return data


def settings_of(result: dict) -> dict:
    """What must be equal for two evaluations to be compared."""
    ids = [p["problem_id"] for p in result.get("per_problem", [])]
    return {
        "task_id": result["task_id"],
        "n_problems": result["n_problems"],
        "problems": tuple(ids) if ids else None,
        "n": result["n"],
        "sampling": result["params_key"],
    }


def check_settings(runs: Sequence[Run], *, allow_mixed: bool = False) -> list[str]:
    """Warnings when runs were evaluated differently; a ``UserError`` instead unless ``allow_mixed``."""
    reference = settings_of(runs[0].result)
    problems = []
    for run in runs[1:]:
        mine = settings_of(run.result)
        # A result without per-problem ids cannot be told apart by its problem set: only the count is compared.
        diffs = [
            k
            for k in reference
            if reference[k] != mine[k] and not (k == "problems" and None in (reference[k], mine[k]))
        ]
        if diffs:
            text = "; ".join(f"{k}: {mine[k]!r} vs {reference[k]!r}" for k in diffs if k != "problems")
            if "problems" in diffs:
                text = (text + "; " if text else "") + "a different problem set"
            problems.append(f"run {run.name} was evaluated with other settings than {runs[0].name} ({text})")
            run.flags.append("mixed evaluation settings")
    if problems and not allow_mixed:
        raise UserError(
            "runs evaluated with different sampling settings cannot be compared: "
            + " | ".join(problems)
            + " (re-evaluate them with the same settings, or pass --allow-mixed-settings to report them flagged)"
        )
    return [f"NOT COMPARABLE: {p}" for p in problems]


def budget_warnings(runs: Sequence[Run]) -> list[str]:
    """Flag sampling methods whose runs generated different numbers of samples (the budgets must match)."""
    budgets = {
        r.name: r.cost.get("samples_generated")
        for r in runs
        if r.cost and r.method != BASE_RUN and get_method(r.method).draws_samples
    }
    if len(set(budgets.values())) > 1:
        listing = ", ".join(f"{name}: {b}" for name, b in sorted(budgets.items()))
        return [f"sampling budgets differ between runs ({listing})"]
    return []
