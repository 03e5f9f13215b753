"""The report of a study: report.md, report.json and its plots, written from the picked runs' records.

What the report reads from the study's folder (:func:`collect`: the picks' test results, curves and training
counts, the base's and the baselines'; :func:`read_hacking`: every run checked for reward hacking), the numbers it
shows (:func:`compute`: intervals, paired differences, slices, seeds, crossovers, answers, JSON-ready) and the files
it writes (:func:`write_study_report`). The markdown is :mod:`.report_md`'s, the plots :mod:`.plots`'.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from grpo_ext.evaluation.registry import PASS_AT_1
from grpo_ext.evaluation.slices import known_attributes
from grpo_ext.experiments.compare.slices import arm_slices
from grpo_ext.experiments.study.anatomy import study_anatomy
from grpo_ext.experiments.study.answers import sample_rows, study_answers
from grpo_ext.experiments.study.budget import estimate
from grpo_ext.experiments.study.config import Setting, Study
from grpo_ext.experiments.study.counts import log_counts, run_counts
from grpo_ext.experiments.study.crossover import arm_crossover
from grpo_ext.experiments.study.dynamics import plot_dynamics, read_dynamics, training_steps
from grpo_ext.experiments.study.expectations import judge_expectations
from grpo_ext.experiments.study.hacking import flags, reading, signals
from grpo_ext.experiments.study.hacking import thresholds as hacking_thresholds
from grpo_ext.experiments.study.options import StudyOptions
from grpo_ext.experiments.study.plots import by_k, model_ks, plot_curves, plot_passk_majk, plot_passk_majk_by_slice
from grpo_ext.experiments.study.report_md import reference_label, render, shown_as
from grpo_ext.experiments.study.seeds import seed_spread
from grpo_ext.experiments.study.signal.report_section import read_signal
from grpo_ext.experiments.study.spent import render_spent, spent
from grpo_ext.experiments.study.stats import (
    BOOTSTRAP,
    arm_summary,
    headline_metrics,
    largest_k,
    paired_difference,
    paper_findings,
    samples_to_reach,
    why_not_comparable,
)
from grpo_ext.io import atomic_write_bytes, atomic_write_json, atomic_write_text
from grpo_ext.methods.cost import COST_FILE, CURVE_FILE, LOG_FILE, RUN_FILE, read_json_file
from grpo_ext.methods.paradigm import get_method

__all__ = ["collect", "compute", "read_hacking", "write_study_report"]


def carried_anatomy(previous: dict | None, stats: dict) -> dict | None:
    """The group anatomy of the report before this one (its ``report.json``), where this one cannot compute it (the
    test sample caches it reads are not committed) and the test results are the ones it was computed with: every
    arm's pass@1 and the base's as the previous report has them. None otherwise: a stale diagnostic is not shown."""
    if not previous or not previous.get("anatomy"):
        return None
    before = {name: arm["metrics"][PASS_AT_1]["mean"] for name, arm in (previous.get("arms") or {}).items()}
    now = {name: arm["metrics"][PASS_AT_1]["mean"] for name, arm in stats["arms"].items()}
    base_before = ((previous.get("base") or {}).get(PASS_AT_1) or {}).get("mean")
    if before != now or base_before != stats["base"][PASS_AT_1]["mean"]:
        return None
    return {**previous["anatomy"], "carried_over": True}


def _run_counts(arm, folder: Path, result: dict) -> dict:
    """:func:`~grpo_ext.experiments.study.counts.run_counts` of one run folder (its cost record, else the copy in its
    test result), with its training config's group size and, for an online run, its training log's prompt passes and
    lowest learning rate (:func:`~grpo_ext.experiments.study.counts.log_counts`)."""
    method = get_method(arm.method)
    cost = read_json_file(folder, COST_FILE) or result.get("training_cost") or {}
    training = (read_json_file(folder, RUN_FILE) or {}).get("training") or {}
    counts = run_counts(cost, training, method.online, method.sequences_per_example)
    log = log_counts(read_json_file(folder, LOG_FILE) if method.online else None)
    return {**counts, **log, "num_generations": training.get("num_generations") if method.online else None}


def _size(result: dict) -> tuple[int, int]:
    return int(result.get("n_problems", len(result.get("per_problem") or []))), int(result["n"])


def collect(study: Study, out: Path, picks: dict[str, Setting]) -> dict:
    """Test results, learning curves and training counts of every picked run, the test results of the base and the
    baselines (those a run of some arms left unscored are left out), and the problems and n of every validation
    score (the search runs', the base's and the baselines': their records, for the report's words)."""
    arms = {}
    for arm in study.arms:
        folders = [study.run_dir(out, arm, picks[arm.name], seed) for seed in study.seeds]
        results = [json.loads((f / f"{study.test.split}.json").read_text()) for f in folders]
        arms[arm.name] = {
            "results": results,
            "curves": [read_json_file(f, CURVE_FILE) for f in folders],
            "counts": [_run_counts(arm, f, r) for f, r in zip(folders, results, strict=True)],
            "online": get_method(arm.method).online,
        }
    base = json.loads((Path(out) / "base" / f"{study.test.split}.json").read_text())
    files = {b.name: Path(out) / "baselines" / b.name / f"{study.test.split}.json" for b in study.baselines}
    baselines = {name: json.loads(f.read_text()) for name, f in files.items() if f.is_file()}
    split = study.validation.split
    validation = {"base": read_json_file(Path(out) / "base", f"{split}.json")}
    validation |= {b.name: read_json_file(Path(out) / "baselines" / b.name, f"{split}.json") for b in study.baselines}
    for arm, setting, seed in study.searched(out, picks):
        validation[f"{arm.name} {setting.slug}"] = read_json_file(
            study.run_dir(out, arm, setting, seed), f"{split}.json"
        )
    validation_sizes = {name: _size(r) for name, r in validation.items() if r}
    return {"arms": arms, "base": base, "baselines": baselines, "validation_sizes": validation_sizes}


def read_hacking(study: Study, out: str | Path, picks: dict[str, Setting]) -> list[dict]:
    """Every run of the study checked for reward hacking (:mod:`grpo_ext.experiments.study.hacking`): the search runs on
    validation and the picks' test seeds, arm by arm in the study's order, each ``{"arm", "setting", "seed", "role",
    "split", "signals", "flags"}``. The strict form is compared with the base's on the run's split; a run without
    its evaluation file is left out."""
    runs = [(*run, "search") for run in study.searched(out, picks)]
    runs += [(*run, "test") for run in study.test_runs(picks)]
    order = {arm.name: i for i, arm in enumerate(study.arms)}
    splits = {"search": study.validation.split, "test": study.test.split}
    reference = {split: read_json_file(Path(out) / "base", f"{split}.json") or {} for split in splits.values()}
    rows = []
    for arm, setting, seed, role in sorted(runs, key=lambda r: (order[r[0].name], r[3] == "test")):
        folder = study.run_dir(out, arm, setting, seed)
        split = splits[role]
        evaluation = read_json_file(folder, f"{split}.json")
        if evaluation is None:
            continue
        history = read_json_file(folder, LOG_FILE)
        curve = read_json_file(folder, CURVE_FILE) or {}
        training = (read_json_file(folder, RUN_FILE) or {}).get("training") or {}
        online = get_method(arm.method).online  # an offline config's max_completion_length is not its samples' cap
        s = signals(
            training_steps(history) if isinstance(history, list) else None,
            curve.get("points"),
            training.get("max_completion_length") if online else None,
            evaluation.get("strict_share"),
            reference[split].get("strict_share"),
        )
        rows.append(
            {"arm": arm.name, "setting": setting.slug, "seed": seed, "role": role, "split": split, "signals": s}
            | {"flags": (raised := flags(s)), "reading": reading(s, raised)}
        )
    return rows


def _budget(entry: dict) -> list[tuple[int, int]]:
    """(generated, gradient samples) per seed: from the runs' counts (:mod:`.counts`), else the cost record copied
    into each test result (data built without run folders)."""
    if entry.get("counts"):
        return [(c["samples_generated"], c["trained_sequences"]) for c in entry["counts"]]
    costs = [r.get("training_cost") or {} for r in entry["results"]]
    return [(int(c.get("samples_generated", 0)), int(c.get("trained_sequences", 0))) for c in costs]


def _scored_metrics(result: dict, k_max: int) -> list[str]:
    """The headline metrics of one run beside the arms: at the arms' K, or at its own largest K where it drew fewer
    samples a problem (a raw base scored at n = 4 beside arms at n = 16 has no maj@16: the table shows "-")."""
    return headline_metrics(min(k_max, largest_k([result])))


def compute(study: Study, data: dict) -> dict:
    """Everything the report shows, JSON-ready."""
    k_max = min(r["n"] for a in data["arms"].values() for r in a["results"])
    metrics = headline_metrics(k_max)
    base = arm_summary([data["base"]], _scored_metrics(data["base"], k_max))
    baselines = {name: arm_summary([r], _scored_metrics(r, k_max)) for name, r in data.get("baselines", {}).items()}
    arms = {}
    for name, entry in data["arms"].items():
        budgets = _budget(entry)
        arms[name] = {
            "metrics": arm_summary(entry["results"], metrics),
            "samples_generated": [b[0] for b in budgets],
            "trained_sequences": [b[1] for b in budgets],
            "counts": entry.get("counts"),
            "online": entry.get("online"),
            "below_base": None,
        }
        arms[name]["below_base"] = arms[name]["metrics"][PASS_AT_1]["high"] < base[PASS_AT_1]["mean"]
    extensions = {}
    for label, spec in study.extensions.items():
        if spec["arm"] not in data["arms"] or spec["against"] not in data["arms"]:
            continue  # a run of some arms only (--arms)
        a, b = data["arms"][spec["arm"]], data["arms"][spec["against"]]
        reach = _reach(a["curves"], b["curves"])
        extensions[label] = {
            **spec,
            "differences": {m: paired_difference(a["results"], b["results"], m) for m in metrics},
            **reach,
        }
    results = {name: entry["results"] for name, entry in data["arms"].items()}
    singles = {name: [result] for name, result in data.get("baselines", {}).items()}
    # those a run left without per-problem records, or scored on other problems, have no seeds or crossover section
    comparable = {
        name: runs for name, runs in {**singles, **results}.items() if why_not_comparable(runs, [data["base"]]) is None
    }
    models = {"base": [data["base"]], **singles, **results}
    attribute = slice_attribute(study, data["base"])
    # the arms a run left out (--arms) are not findings of it: only measured ones are listed
    findings = [f for f in paper_findings(results, data["base"]) if f["verdict"] != "not measured"]
    return {
        "expectations": judge_expectations(study.expectations, results, data["base"], data.get("baselines")),
        "k_max": k_max,
        "metrics": metrics,
        "base": base,
        "baselines": baselines,
        "arms": arms,
        "extensions": extensions,
        "findings": findings,
        # pass@1 per slice of the test problems (the operation, the operands...): every attribute they carry
        "slices": arm_slices({**singles, **results}, data["base"]),
        # each arm's seeds, with intervals over seeds and problems (the rest resample problems only)
        "seeds": seed_spread({name: runs for name, runs in comparable.items() if name in results}, data["base"]),
        "crossovers": {name: arm_crossover(runs, data["base"]) for name, runs in comparable.items()},
        "slice_attribute": attribute,
        "answers": study_answers(models, attribute),
        "strict_form": data["base"].get("strict_form"),
        "samples": sample_rows(models, attribute),
        "bootstrap": BOOTSTRAP,
        # the problems and n every model was scored at, from its results: what the report's words say
        "evaluation_sizes": {
            "test": {name: _size(runs[0]) for name, runs in models.items()},
            "validation": data.get("validation_sizes") or {},
        },
    }


def slice_attribute(study: Study, base: dict) -> str | None:
    """The attribute the answers section and the per-slice plot split by: the one the expectations judge on each
    value of (``slices``), else the first one the test problems carry; None without any."""
    known = known_attributes([base])
    wanted = [e.slices for e in study.expectations.values() if e.slices] + known
    return next((a for a in wanted if a in known), None)


def _reach(curves_a: list, curves_b: list) -> dict:
    """Samples arm A needs to reach arm B's final curve pass@1 (mean over B's seeds), per A seed, and the ratio to
    the samples B generated."""
    curves_a, curves_b = [c for c in curves_a if c], [c for c in curves_b if c]
    if not curves_a or not curves_b or "samples_generated" not in curves_b[0]["points"][-1]:
        return {"reach": None}
    target = float(np.mean([c["points"][-1]["eval/pass@1"] for c in curves_b]))
    spent = float(np.mean([c["points"][-1]["samples_generated"] for c in curves_b]))
    start = float(np.mean([c["points"][0]["eval/pass@1"] for c in curves_b]))
    if target <= start:  # the reference never rose above its start: every curve "reaches" it at 0 samples
        return {"reach": {"target_pass@1": target, "reference_start": start, "reference_samples": spent, "ratio": None}}
    per_seed = [samples_to_reach(c["points"], target) for c in curves_a]
    reached = [s for s in per_seed if s is not None]
    ratio = float(np.mean(reached)) / spent if reached and len(reached) == len(per_seed) and spent else None
    return {"reach": {"target_pass@1": target, "reference_samples": spent, "per_seed": per_seed, "ratio": ratio}}


def write_study_report(
    study: Study,
    out: str | Path,
    picks: dict[str, Setting],
    options: StudyOptions | None = None,
    command: str | None = None,
) -> dict:
    """report.md, report.json and the plots of a finished study in `out`; the anatomy section only with the driver's
    `options` (the folder of its method configs); `command`, the one that reproduces it, in the report."""
    out = Path(out)
    search = json.loads((out / "search.json").read_text())
    data = collect(study, out, picks)
    stats = compute(study, data)
    anatomy = study_anatomy(study, out, picks, options.configs) if options is not None else None
    if anatomy is None:
        anatomy = carried_anatomy(read_json_file(out, "report.json"), stats)
    # only a study that measures the signal shows it: a file a run of other arms left in `out` is not this run's
    signal = read_signal(out) if study.signal is not None else None
    cost = render_spent(spent(study, out), estimate(study) if study.budget else None)
    dynamics = read_dynamics(study, out, picks)  # the online runs' training logs: search runs and test seeds
    hacking = read_hacking(study, out, picks)  # every run's records checked for reward hacking
    models = {
        "base": [data["base"]],
        **{name: [result] for name, result in data["baselines"].items()},
        **{name: entry["results"] for name, entry in data["arms"].items()},
    }
    stats_by_k = {name: by_k(results, model_ks(results)) for name, results in models.items()}
    label = reference_label(study)  # the plots' name for the base; report.json keeps its key
    paths = {
        "md": atomic_write_text(
            out / "report.md", render(study, search, stats, command, anatomy, signal, cost, dynamics, hacking)
        ),
        "json": atomic_write_json(
            out / "report.json",
            {
                "search": search,
                **stats,
                "by_k": stats_by_k,
                "anatomy": anatomy,
                "signal": signal,
                "dynamics": dynamics,
                "hacking": {"thresholds": hacking_thresholds(), "runs": hacking},
            },
        ),
        "curves": atomic_write_bytes(out / "curves.png", plot_curves(data)),
        "passk_majk": atomic_write_bytes(
            out / "passk_majk.png", plot_passk_majk({shown_as(k, label): v for k, v in stats_by_k.items()})
        ),
    }
    if stats["slice_attribute"]:
        shown = {shown_as(k, label): v for k, v in models.items()}
        figure = plot_passk_majk_by_slice(shown, stats["slice_attribute"])
        paths["passk_majk_by_slice"] = atomic_write_bytes(out / "passk_majk_by_slice.png", figure)
    figure = plot_dynamics(dynamics)
    if figure is not None:
        paths["dynamics"] = atomic_write_bytes(out / "dynamics.png", figure)
    return paths
