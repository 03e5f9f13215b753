"""The stages of a study, run in one output folder (``scripts/run_methods.py``, whose doc describes them): the start
(the SFT model every arm trains from), the learning signal, the two search stages on validation, the picks' test runs,
and the report; ``run_methods.json`` records each sitting's timings.

The runs themselves are :mod:`.runs`' (their jobs, folders, scores and resumption); the command line that checks the
flags and holds the folder is the script's."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grpo_ext.experiments.study.options import StudyOptions

__all__ = ["run_study", "search_stage", "stage_picks", "with_start", "write_expectations", "write_reports"]


def search_stage(study, out: Path, options: StudyOptions, jobs: int, reference_picks: dict | None, also=()) -> tuple:
    """One stage of the search (see scripts/run_methods.py's doc): train and score its runs on validation (with the
    jobs `also`, side by side), then pick. Returns the grids, validation scores and picks of the stage's arms, by arm
    name."""
    from grpo_ext.experiments.study.runs import Job, run_jobs

    search = [Job(arm, setting, seed, study.validation) for arm, setting, seed in study.search(reference_picks)]
    run_jobs([*also, *search], out, study, options, jobs)
    return stage_picks(study, out, reference_picks)


def stage_picks(study, out: Path, reference_picks: dict | None) -> tuple:
    """The picks of one search stage from its runs' validation records in `out` (the stage's runs all scored): the
    grids, validation scores, picks and scores by seed of the stage's arms, by arm name. The search makes its picks so,
    and --report-only derives them again to check the picks search.json records."""
    from grpo_ext.experiments.study.config import pick_settings
    from grpo_ext.experiments.study.runs import Job, read_score

    search = [Job(arm, setting, seed, study.validation) for arm, setting, seed in study.search(reference_picks)]
    by_seed = {}
    for job in search:
        by_seed.setdefault(job.arm.name, {}).setdefault(job.setting.slug, []).append(read_score(job, out, study))
    # a setting's score is its mean over the search seeds (one seed's luck does not make a pick)
    scores = {arm: {slug: sum(v) / len(v) for slug, v in slugs.items()} for arm, slugs in by_seed.items()}
    grids = {arm.name: study.grid(arm, reference_picks) for arm in study.search_arms(reference_picks)}
    return grids, scores, pick_settings(scores, grids), by_seed


def with_start(study, out: Path, options: StudyOptions) -> tuple[StudyOptions, dict]:
    """The study's start built (or reused) in `out` (:func:`grpo_ext.experiments.study.start.build_start`), and the
    options every run then takes: the start as their model, named by its hash, its train prompts skipped."""
    from grpo_ext.experiments.study.runs import quick_flags
    from grpo_ext.experiments.study.start import build_start, start_identity

    model, record = build_start(
        study.start, options.base, options.configs, out, quick_flags(study.start.method, options)
    )
    options = replace(
        options,
        base=str(model),
        base_identity=start_identity(record),
        raw_base=options.base,
        train_offset=int(record["train_prompts"]["size"]),
    )
    return options, record


def write_expectations(study, out: Path, picks: dict) -> dict:
    """expectations.json / expectations.md: every expectation judged with the baselines' test results too (an
    expectation against a baseline, the slice expectations), the rows :func:`judge_expectations` returns."""
    from grpo_ext.experiments.study.expectations import judge_expectations, render_expectations
    from grpo_ext.experiments.study.report import collect
    from grpo_ext.io import atomic_write_json, atomic_write_text

    data = collect(study, out, picks)
    results = {name: entry["results"] for name, entry in data["arms"].items()}
    baselines = {
        b.name: json.loads((out / "baselines" / b.name / f"{study.test.split}.json").read_text())
        for b in study.baselines
    }
    rows = judge_expectations(study.expectations, results, data["base"], baselines=baselines)
    return {
        "expectations_json": atomic_write_json(out / "expectations.json", {"expectations": rows}),
        "expectations_md": atomic_write_text(
            out / "expectations.md", "\n".join(render_expectations(rows, study.reference_label))
        ),
    }


def write_reports(study, out: Path, picks: dict, options: StudyOptions | None, command: str) -> dict:
    """report.md / report.json / plots, and expectations.json / .md where report.py does not judge them all."""
    from grpo_ext.experiments.study.report import write_study_report

    paths = write_study_report(study, out, picks, options, command=command)
    if study.baselines or any(e.slice or e.slices for e in study.expectations.values()):
        # what report.py does not judge yet: expectations against a baseline, and on slices, in their own file
        paths.update(write_expectations(study, out, picks))
    return paths


def run_study(study, args, options, out: Path, command: str) -> dict:
    """The study's stages (scripts/run_methods.py's doc) in `out`, which the script's `main` holds; returns the picks,
    scores, report paths."""
    from grpo_ext.experiments.study.runs import Job, read_score, run_jobs
    from grpo_ext.io import atomic_write_json, portable_path

    start_record = None
    if study.start is not None:  # stage 0: the SFT model every arm trains from, made once (grpo_ext...study.start)
        options, start_record = with_start(study, out, options)
        if args.start_only:
            print(f"start: {options.base} ({options.base_identity})", flush=True)
            return {"start": start_record}
    start = time.perf_counter()
    if study.signal is not None:  # stage 0: the learning signal at the base, before the search spends any budget
        from grpo_ext.experiments.study.signal.stage_zero import run_signal_stage

        run_signal_stage(study, out, options)
    signal_done = time.perf_counter()

    # The base is scored on validation too: a pick is only worth its test runs if it beats the base there.
    base_validation = Job(None, None, None, study.validation)
    baselines = {split: [Job(None, None, None, e, b) for b in study.baselines] for split, e in
                 (("validation", study.validation), ("test", study.test))}  # fmt: skip
    also = [base_validation, *baselines["validation"]]
    grids, scores, picks, by_seed = search_stage(study, out, options, args.jobs, None, also=also)
    shared = search_stage(study, out, options, args.jobs, picks)  # the rate_of arms, at their reference's pick
    for found, more in zip((grids, scores, picks, by_seed), shared, strict=True):
        found.update(more)
    order = [arm.name for arm in study.arms]  # search.json and the report list the arms as the study does
    atomic_write_json(
        out / "search.json",
        {
            "validation": vars(study.validation),
            "search_seed": study.search_seed,
            "search_seeds": list(study.search_seeds),
            "test_seeds": study.seeds,
            # the model every arm started from (the study's `start`: its record, with its hash), when not the base
            "start": start_record,
            "base": read_score(base_validation, out, study),
            # the base at other prompts (the study's baselines), trained on nothing
            "baselines": {job.baseline.name: read_score(job, out, study) for job in baselines["validation"]},
            "grid": {name: [s.as_dict() for s in grids[name]] for name in order},
            "scores": {name: scores.get(name, {}) for name in order},  # none: one setting, nothing to pick
            "scores_by_seed": {name: by_seed.get(name, {}) for name in order},
            "picks": {name: {"slug": picks[name].slug, **picks[name].as_dict()} for name in order},
            # each rate_of arm: the arm whose picked learning rate it trained at, and that rate
            "rate_of": {
                a.name: {"arm": a.rate_of, "lr": picks[a.rate_of].as_dict()["lr"]} for a in study.arms if a.rate_of
            },
        },
    )
    search_done = time.perf_counter()

    final = [Job(arm, setting, seed, study.test) for arm, setting, seed in study.test_runs(picks)]
    run_jobs([Job(None, None, None, study.test), *baselines["test"], *final], out, study, options, args.jobs)
    trained = time.perf_counter()

    paths = write_reports(study, out, picks, options, command)
    end = time.perf_counter()
    record = {
        "command": command,
        "study": portable_path(args.study),
        "quick": args.quick,
        "signal_seconds": round(signal_done - start, 1),
        "search_seconds": round(search_done - signal_done, 1),
        "final_seconds": round(trained - search_done, 1),
        "report_seconds": round(end - trained, 1),
        "total_seconds": round(end - start, 1),
    }
    # A resumed study runs in several sittings: each appends its own timings (a sitting that only rewrote the report
    # must not replace the record of the one that trained everything).
    previous = out / "run_methods.json"
    sittings = json.loads(previous.read_text()).get("sittings", []) if previous.is_file() else []
    atomic_write_json(previous, {**record, "sittings": [*sittings, record]})
    print(f"total {record['total_seconds']} s; report: {paths['md']}")
    return {"picks": picks, "scores": scores, "paths": paths, "record": record}
