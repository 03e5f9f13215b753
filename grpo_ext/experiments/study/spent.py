"""What a study has cost so far, measured: the counterpart of :mod:`.budget`'s estimate, read from the records its runs
left in the output folder (``training_cost.json``: the method's own sampling and training, then its learning-curve
evaluations; ``<split>.json``: the harness's sampling and scoring seconds). Every job runs on one core, so its
seconds are core-seconds; on a machine shared with other work (or ``--jobs`` above the cores) they are inflated by
the contention, and an evaluation resumed from its sample cache counts only the samples its last sitting drew.

JSON (:func:`spent`): ``{"rows": [{"what", "runs", "train_core_seconds", "eval_core_seconds"}], "core_hours"}``,
one row per arm (its search and test runs together) and one per run without training (the base, each baseline).
"""

from __future__ import annotations

import json
from pathlib import Path

from grpo_ext.errors import read_json_object, user_file
from grpo_ext.experiments.study.spec import Study
from grpo_ext.methods.cost import COST_FILE
from grpo_ext.report_format import fmt, md_header, md_row

__all__ = ["render_spent", "spent"]


def _eval_seconds(folder: Path) -> float:
    seconds = 0.0
    for split in sorted(folder.glob("*.json")):
        with user_file(split, "--out"):  # junk: one line naming it
            record = json.loads(split.read_text())
        samples = record.get("samples") if isinstance(record, dict) and "study_evaluation" in record else None
        if samples:
            seconds += float(samples.get("seconds", 0.0)) + float(samples.get("scoring_seconds", 0.0))
    return seconds


def _train_seconds(folder: Path) -> float:
    cost = folder / COST_FILE
    if not cost.is_file():
        return 0.0
    record = read_json_object(cost, "--out", "a run's training cost record")
    return float(record.get("wall_seconds", 0.0)) + float(record.get("curve_seconds", 0.0))


def spent(study: Study, out: str | Path) -> dict:
    """The measured core-seconds of every finished part of the study in ``out`` (see the module docstring)."""
    out = Path(out)
    rows = []
    for arm in study.arms:
        folders = sorted(p.parent for p in (out / "runs" / arm.name).glob("*/*/" + COST_FILE))
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
        rows.append({"what": f"{name} (no training)", "runs": int(folder.is_dir()), "train_core_seconds": 0.0,
                     "eval_core_seconds": seconds})  # fmt: skip
    total = sum(r["train_core_seconds"] + r["eval_core_seconds"] for r in rows)
    return {"rows": rows, "core_hours": total / 3600}


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
