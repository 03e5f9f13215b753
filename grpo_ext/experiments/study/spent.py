"""What a study has cost so far, measured: the counterpart of :mod:`.budget`'s estimate, read from the records its runs
left in the output folder (``training_cost.json``: the method's own sampling and training, then its learning-curve
evaluations; ``<split>.json``: the harness's sampling and scoring seconds). Every job runs on one core, so its
seconds are core-seconds; on a machine shared with other work (or ``--jobs`` above the cores) they are inflated by
the contention, and an evaluation resumed from its sample cache counts only the samples its last sitting drew.

JSON (:func:`spent`): ``{"rows": [{"what", "runs", "train_core_seconds", "eval_core_seconds"}], "core_hours"}``,
one row for the study's start (when it has one: its SFT run in ``start/adapter``), one per arm (its search and test
runs together) and one per run without training (the base, each baseline); the rows are named as
:func:`.budget.estimate`'s, so :func:`render_spent` puts the plan beside each.

:func:`measured_rates` turns the same records into the rates of the study's ``budget`` section (a training runner's
seconds a trained sequence, the harness's samples a second by ``n``), the planning rate kept wherever nothing was
measured yet, so that :func:`.budget.estimate` prices the whole study at what its runs cost: the plan written before
the first run stays as it was, and the projection beside it moves with every finished run.
"""

from __future__ import annotations

import json
from pathlib import Path

from grpo_ext.errors import read_json_object, user_file
from grpo_ext.experiments.study.spec import Study
from grpo_ext.methods.cost import COST_FILE
from grpo_ext.methods.paradigm import get_method
from grpo_ext.report_format import fmt, md_header, md_row

__all__ = ["measured_rates", "render_measured_rates", "render_spent", "spent"]


def _evaluations(folder: Path) -> list[dict]:
    """The ``samples`` part (``generated``, ``seconds``, ...) and ``n`` of every study evaluation in ``folder``."""
    found = []
    for split in sorted(folder.glob("*.json")):
        with user_file(split, "--out"):  # junk: one line naming it
            record = json.loads(split.read_text())
        samples = record.get("samples") if isinstance(record, dict) and "study_evaluation" in record else None
        if samples:
            found.append({**samples, "n": int(record.get("n", 0))})
    return found


def _eval_seconds(folder: Path) -> float:
    return sum(float(s.get("seconds", 0.0)) + float(s.get("scoring_seconds", 0.0)) for s in _evaluations(folder))


def _cost(folder: Path) -> dict:
    cost = folder / COST_FILE
    return read_json_object(cost, "--out", "a run's training cost record") if cost.is_file() else {}


def _train_seconds(folder: Path) -> float:
    record = _cost(folder)
    return float(record.get("wall_seconds", 0.0)) + float(record.get("curve_seconds", 0.0))


def _run_folders(out: Path, arm) -> list[Path]:
    return sorted(p.parent for p in (out / "runs" / arm.name).glob("*/*/" + COST_FILE))


def _start_folder(study: Study, out: Path) -> Path | None:
    """The start's training run (:mod:`.start`: ``<out>/start/adapter``), where the study has a start that finished
    training; None otherwise."""
    folder = out / "start" / "adapter"
    return folder if study.start is not None and (folder / COST_FILE).is_file() else None


def _trainings(study: Study, out: Path) -> list[tuple[str, Path]]:
    """(runner, folder) of every training run in ``out``: the start's, then every arm's."""
    start = _start_folder(study, out)
    runs = [(get_method(study.start.method).runner, start)] if start is not None else []
    return runs + [(get_method(arm.method).runner, f) for arm in study.arms for f in _run_folders(out, arm)]


def spent(study: Study, out: str | Path) -> dict:
    """The measured core-seconds of every finished part of the study in ``out`` (see the module docstring)."""
    out = Path(out)
    rows = []
    if study.start is not None:  # its SFT run and learning curve; its evaluations are the base's (below)
        start = _start_folder(study, out)
        seconds = _train_seconds(start) if start is not None else 0.0
        rows.append({"what": f"start ({study.start.label})", "runs": int(start is not None),
                     "train_core_seconds": seconds, "eval_core_seconds": 0.0})  # fmt: skip
    for arm in study.arms:
        folders = _run_folders(out, arm)
        rows.append(
            {
                "what": arm.name,
                "runs": len(folders),
                "train_core_seconds": sum(_train_seconds(f) for f in folders),
                "eval_core_seconds": sum(_eval_seconds(f) for f in folders),
            }
        )
    singles = {"base": out / "base", **{b.name: out / "baselines" / b.name for b in study.baselines}}
    for name, folder in singles.items():
        seconds = _eval_seconds(folder) if folder.is_dir() else 0.0
        label = study.reference_label if name == "base" else name  # the estimate's name: "SFT start (no training)"
        rows.append({"what": f"{label} (no training)", "runs": int(folder.is_dir()), "train_core_seconds": 0.0,
                     "eval_core_seconds": seconds})  # fmt: skip
    total = sum(r["train_core_seconds"] + r["eval_core_seconds"] for r in rows)
    return {"rows": rows, "core_hours": total / 3600}


def measured_rates(study: Study, out: str | Path) -> dict:
    """The study's ``budget`` rates with every rate its finished runs in ``out`` measured put in (JSON: the budget's
    form, plus ``measured``: what each measured rate rests on). A training runner's seconds a sequence: its runs'
    training seconds (generation included, the learning curve not) over the sequences they trained, the start's run
    among them (its method's runner: SFT's seconds a sequence). The harness's samples a second by ``n``: the
    evaluations' samples drawn over their seconds, the trained models' (the arms, and the start where the study has
    one) apart from the base's. Seconds measured on a shared machine are inflated by the contention, as
    :func:`spent`'s are."""
    out = Path(out)
    budget = study.budget or {}
    per_sequence = dict(budget.get("seconds_per_sequence") or {})
    sampling = dict(budget.get("eval_samples_per_second") or {})
    measured: dict = {"seconds_per_sequence": {}, "eval_samples_per_second": {}}
    training: dict[str, list[float]] = {}  # runner -> [seconds, sequences, runs]
    evaluations: dict[str, dict[int, list[float]]] = {"trained": {}, "base": {}}  # kind -> n -> [samples, seconds]

    def add_evaluations(kind: str, folder: Path) -> None:
        for s in _evaluations(folder):
            if s.get("generated") and s.get("seconds"):  # one resumed from its cache drew fewer than it scored
                totals = evaluations[kind].setdefault(s["n"], [0.0, 0.0])
                totals[0] += float(s["generated"])
                totals[1] += float(s["seconds"])

    for runner, folder in _trainings(study, out):  # the start's SFT is its runner's too
        cost = _cost(folder)
        if cost.get("trained_sequences"):
            totals = training.setdefault(runner, [0.0, 0.0, 0])
            totals[0] += float(cost.get("train_seconds", cost.get("wall_seconds", 0.0)))
            totals[1] += float(cost["trained_sequences"])
            totals[2] += 1
        add_evaluations("trained", folder)
    raw = {b.name for b in study.baselines if b.raw_base or study.start is None}
    add_evaluations("trained" if study.start is not None else "base", out / "base")
    for b in study.baselines:
        add_evaluations("base" if b.name in raw else "trained", out / "baselines" / b.name)
    for runner, (seconds, sequences, runs) in training.items():
        per_sequence[runner] = seconds / sequences
        measured["seconds_per_sequence"][runner] = {"runs": runs, "sequences": int(sequences)}
    for kind, by_n in evaluations.items():
        if by_n:
            # measured rates by n replace a single planned rate, and a planned rate at the same n
            planned = sampling.get(kind)
            rates = {int(k): float(v) for k, v in planned.items()} if isinstance(planned, dict) else {}
            sampling[kind] = {**rates, **{n: samples / seconds for n, (samples, seconds) in by_n.items()}}
            measured["eval_samples_per_second"][kind] = {n: int(samples) for n, (samples, _) in by_n.items()}
    return {**budget, "seconds_per_sequence": per_sequence, "eval_samples_per_second": sampling, "measured": measured}


def render_spent(result: dict, estimate: dict | None = None) -> str:
    """The measured cost as a Markdown table; with the study's ``estimate`` (:func:`.budget.estimate`), each arm's
    planned core-hours and runs beside it."""
    planned = {r["what"].split(" (")[0]: r for r in (estimate or {}).get("rows", [])}
    lines = md_header(
        ["what", "runs done", "training core-h", "evaluation core-h", "planned runs", "planned core-h"], "lrrrrr"
    )
    for r in result["rows"]:
        plan = planned.get(r["what"].split(" (")[0])
        plan_cells = (
            [plan["runs"], fmt((plan["train_core_seconds"] + plan["eval_core_seconds"]) / 3600, 2)]
            if plan
            else ["-", "-"]
        )
        hours = [fmt(r[f"{part}_core_seconds"] / 3600, 2) for part in ("train", "eval")]
        lines.append(md_row([r["what"], r["runs"], *hours, *plan_cells]))
    total = f"\nMeasured: {result['core_hours']:.1f} core-hours"
    if estimate:
        total += f" (estimate for the whole study: {estimate['core_hours']:.1f})"
    lines.append(total)
    return "\n".join(lines)


def render_measured_rates(rates: dict, projected: dict, planned: dict) -> str:
    """One paragraph: the rates :func:`measured_rates` found (the rest are the plan's) and what the whole study costs
    at them (``projected``: :func:`.budget.estimate` at ``rates``) against the plan (``planned``: at the budget's)."""
    measured = rates.get("measured", {})
    parts = [
        f"{runner} {rates['seconds_per_sequence'][runner]:.2f} s a sequence ({m['runs']} runs)"
        for runner, m in measured.get("seconds_per_sequence", {}).items()
    ]
    for kind, by_n in measured.get("eval_samples_per_second", {}).items():
        rate = rates["eval_samples_per_second"][kind]
        cells = ", ".join(f"{rate[n]:.1f} at n = {n}" for n in sorted(by_n))
        parts.append(f"the harness on {'a trained model' if kind == 'trained' else 'the raw base'}: {cells} samples/s")
    if not parts:
        return "No rate measured yet: the projection is the plan."
    limit = planned.get("limit_core_hours")
    verdict = "" if limit is None else (" (fits)" if projected["core_hours"] <= limit else " (**over**)")
    return (
        f"At the rates measured here ({'; '.join(parts)}; every other rate the plan's, an evaluation at an n not "
        f"measured priced at the nearest n below it): the whole study costs **{projected['core_hours']:.1f} "
        f"core-hours**{verdict}, planned {planned['core_hours']:.1f} against a limit of {limit}."
    )
