"""The fair comparison: every arm searched on validation, its pick trained with every seed and scored on test.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 python scripts/run_methods.py --study configs/compare.yaml --out results/compare
    python scripts/run_methods.py --study configs/compare.yaml --quick --out outputs/compare_quick   # minutes

0. Signal (when the study has a `signal` section): before any budget is spent, the mean gradient cosine between
   independent minibatches at the base, for each objective x samples a step, with the signal arm's method config
   (signal.json; the arms' batch size is chosen on it). --quick measures the arm's quick batch only, 3 minibatches.
1. Search: every (arm, setting) of the arms that search their own learning rate is trained with the search seed
   (`python -m grpo_ext.methods`, in a worker process; `--jobs` at a time) and scored on the validation split
   (validation.json in the run folder); each arm's best setting on validation is its pick.
2. Shared rates: every arm with `rate_of: <arm>` is trained with the search seed at that arm's picked learning rate
   (its own grid axes, if any, at that rate), scored on validation and picked the same way.
   search.json holds the grid, every score, the picks, and where each shared rate came from. Test numbers are
   never computed for a setting that was not picked, so they cannot enter a pick.
3. The picks are trained with every test seed (the search seed is none of them) and scored on test (test.json),
   the base too.
4. The report (report.md, report.json, plots) from those test results.

Baselines (the study's `baselines`: the base at another prompt, e.g. 8 worked examples) train nothing and are scored on
validation beside the base (search.json) and on test beside the picks (baselines/<name>/).

--report-only writes the report of a finished study from what its runs left in --out (their JSON records, what is
committed: no weights needed) and trains, samples and scores nothing; a missing test result is named.

--estimate prints what the study will cost (every run and evaluation at the planning rates of its `budget` section,
grpo_ext.experiments.study.budget) and exits. --quick on a study whose base is not the embedded model rehearses it on a
tiny random model with the base's tokenizer pipeline and chat template, its vocabulary retrained on the task's text
(outputs/tiny_models/; --rehearsal-tokenizer: another tokenizer's), every path of the real study in a minute; its
numbers mean nothing.

Resumable: signal.json is reused while its recorded settings are the current ones, a run folder holding
training_cost.json is never trained again, and evaluations resume from their sample caches, so an interrupted
command (or one spread over several sittings) picks up where it stopped.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grpo_ext.experiments.study.options import StudyOptions

ROOT = Path(__file__).resolve().parents[1]

# --quick: 2 optimizer steps on 8 train prompts, then each method's own quick (or rehearsal) flags, which its paradigm
# entry holds (grpo_ext.methods.paradigm), and a tiny evaluation.
QUICK_COMMON = (
    "--max_steps 2 --train_size 8 --warmup_steps 0 --logging_steps 1 --curve_every 1 --curve_prompts 4 "
    "--gradient_accumulation_steps 1"
)
QUICK_EVALUATION = {"limit": 6, "n": 4, "max_new_tokens": 32, "n_by": ()}
QUICK_REHEARSAL_EVALUATION = {**QUICK_EVALUATION, "max_new_tokens": 16}
# --quick on a real base: the rehearsal model (a tiny random model with the base's tokenizer), kept between runs
TINY_MODELS = ROOT / "outputs" / "tiny_models"


def quick_method_flags(rehearsal: bool) -> dict[str, str]:
    """--quick's flags by runner (the study looks them up by its methods' runner), from the paradigm's entries."""
    from grpo_ext.methods import METHODS

    return {m.runner: m.rehearsal_flags if rehearsal else m.quick_flags for m in METHODS.values()}


def build_parser() -> argparse.ArgumentParser:
    from grpo_ext.evaluation.cli import HarnessArgumentParser

    parser = HarnessArgumentParser(prog="run_methods.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", default=str(ROOT / "configs" / "compare.yaml"), help="the study (YAML)")
    parser.add_argument("--out", default=None, help="output folder (default: results/compare)")
    parser.add_argument("--model", default=None, help="the base every arm starts from (default: the study's)")
    parser.add_argument(
        "--arms",
        default=None,
        help="comma-separated arms to run (default: all; a rate_of arm needs its reference arm)",
    )
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time, one process each (default: 2)")
    parser.add_argument("--quick", action="store_true", help="every arm and the search on a tiny budget")
    parser.add_argument(
        "--rehearsal-tokenizer",
        default=None,
        help="--quick on a real base: build the rehearsal model on this tokenizer (and its chat template) instead of "
        "the base's (a test without the real model)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument(
        "--estimate", action="store_true", help="print the study's cost at its budget's planning rates and exit"
    )
    parser.add_argument(
        "--start-only",
        action="store_true",
        help="build (or check) the study's start, the SFT model every arm trains from, and exit",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="write the report of the finished study in --out from its runs' records (no training, no sampling)",
    )
    return parser


def search_stage(study, out: Path, options: StudyOptions, jobs: int, reference_picks: dict | None, also=()) -> tuple:
    """One stage of the search (see the module's doc): train and score its runs on validation (with the jobs `also`,
    side by side), then pick. Returns the grids, validation scores and picks of the stage's arms, by arm name."""
    from grpo_ext.experiments.study.config import pick_settings
    from grpo_ext.experiments.study.runs import Job, read_score, run_jobs

    search = [Job(arm, setting, seed, study.validation) for arm, setting, seed in study.search(reference_picks)]
    run_jobs([*also, *search], out, study, options, jobs)
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
        "expectations_md": atomic_write_text(out / "expectations.md", "\n".join(render_expectations(rows))),
    }


def write_reports(study, out: Path, picks: dict, options: StudyOptions | None, command: str) -> dict:
    """report.md / report.json / plots, and expectations.json / .md where report.py does not judge them all."""
    from grpo_ext.experiments.study.report import write_study_report

    paths = write_study_report(study, out, picks, options, command=command)
    if study.baselines or any(e.slice or e.slices for e in study.expectations.values()):
        # what report.py does not judge yet: expectations against a baseline, and on slices, in their own file
        paths.update(write_expectations(study, out, picks))
    return paths


def check_same_study(study, search: dict, found: Path) -> None:
    """--report-only rewrites the report of the study `search` (its search.json) records, never as another one: a
    search.json of other seeds or validation sizes (--quick on a full study) is refused, or the full study's report
    would be replaced by one of some of its seeds, its results labelled with sizes they were not scored at."""
    from grpo_ext.errors import UserError

    fields = ("split", "limit", "n", "temperature", "metric")
    recorded = {"test_seeds": search.get("test_seeds")}
    recorded |= {f"validation.{k}": (search.get("validation") or {}).get(k) for k in fields}
    given = {"test_seeds": list(study.seeds), **{f"validation.{k}": getattr(study.validation, k) for k in fields}}
    differ = [name for name in given if recorded[name] != given[name]]
    if differ:
        raise UserError(
            f"--report-only: {found} records {', '.join(f'{k} {recorded[k]}' for k in differ)} where the study as "
            f"given has {', '.join(f'{k} {given[k]}' for k in differ)}: its report is rewritten only with the settings "
            "it ran with (the same --study, and --quick only for a --quick study)"
        )


def report_only(study, out: Path, options: StudyOptions, command: str) -> dict:
    """--report-only: the report of the finished study in `out`, from the picks in search.json and every test result;
    the anatomy of the test groups only where the sample caches it reads are there (they are not committed)."""
    from grpo_ext.errors import UserError
    from grpo_ext.experiments.study.runs import Job, evaluation_file, job_dir
    from grpo_ext.experiments.study.spec import Setting

    found = out / "search.json"
    if not found.is_file():
        raise UserError(f"--report-only: {found} is missing: the study in {out} has not finished its search")
    search = _json_object(found, "the search's record (picks, test_seeds)")
    if not isinstance(search.get("picks", {}), dict):
        raise UserError(f"--report-only: {found}: picks is not a mapping of arm names to settings")
    check_same_study(study, search, found)
    picks = {}
    for arm in study.arms:
        pick = search.get("picks", {}).get(arm.name)
        if pick is None:
            raise UserError(f"--report-only: {found} has no pick for arm {arm.name!r}")
        if not isinstance(pick, dict):
            raise UserError(f"--report-only: {found}: the pick of arm {arm.name!r} is not a mapping of settings")
        picks[arm.name] = Setting(tuple((k, v) for k, v in pick.items() if k != "slug"))
    base = [Job(None, None, None, study.test), *(Job(None, None, None, study.test, b) for b in study.baselines)]
    jobs = [*base, *(Job(arm, setting, seed, study.test) for arm, setting, seed in study.test_runs(picks))]
    missing = [f for f in (evaluation_file(job_dir(j, out, study), j.evaluation) for j in jobs) if not f.is_file()]
    if missing:
        raise UserError(
            f"--report-only: {len(missing)} of {len(jobs)} test results are missing in {out}, e.g. {missing[0]}; "
            "run the study without --report-only to finish them"
        )
    check_test_results(study, out, options, jobs)
    # the group anatomy reads the base's and each arm's first seed's test samples
    read = [out / "base", *(study.run_dir(out, arm, picks[arm.name], study.seeds[0]) for arm in study.arms)]
    if not all((folder / f"{study.test.split}_samples.jsonl").is_file() for folder in read):
        print("--report-only: the test sample caches are not here (not committed): no group anatomy", flush=True)
        options = None
    paths = write_reports(study, out, picks, options, command)
    print(f"report: {paths['md']}")
    return {"picks": picks, "paths": paths}


def _json_object(path: Path, what: str) -> dict:
    """The JSON object in `path`, else a `UserError` naming the file (junk, empty, a list)."""
    from grpo_ext.errors import UserError, user_file

    with user_file(path, "--report-only"):
        record = json.loads(path.read_text())
    if not isinstance(record, dict):
        raise UserError(f"--report-only: {path} is not {what}: expected a JSON object, got {type(record).__name__}")
    return record


# What the report reads of every test result.
_RESULT_FIELDS = ("n_problems", "n", "params", "pass@k", "maj@k", "per_problem", "model_fingerprint")


def check_test_results(study, out: Path, options, jobs) -> None:
    """Every test result the report reads is what the study scores, checked before anything is written: a result file
    (a JSON object with the report's fields), of the study's problem count (`limit`: a file cut to 10 problems would
    be averaged as if it held them all), temperature and samples a problem, recorded with the study's sampling, task,
    limit and dtype (what a study that resumes checks; not the model's recorded name, a path of the machine that
    scored it or a start's hash), and one model fingerprint per model: the results of one folder, and the base's with
    those of the baselines scored on it, were drawn from the same weights."""
    from grpo_ext.errors import UserError
    from grpo_ext.experiments.study.runs import _evaluation_plan, evaluation_file, job_dir

    fingerprints: dict[str, tuple[Path, str]] = {}
    for job in jobs:
        folder = job_dir(job, out, study)
        path = evaluation_file(folder, job.evaluation)
        result = _json_object(path, "an evaluation result")
        missing = [name for name in _RESULT_FIELDS if name not in result]
        if missing or not isinstance(result["params"], dict) or not isinstance(result["per_problem"], list):
            what = f"no {', '.join(missing)}" if missing else "params or per_problem of the wrong type"
            raise UserError(f"--report-only: {path} is not an evaluation result ({what})")
        evaluation = job.evaluation
        expected = {
            "n_problems": evaluation.limit,
            "problems listed": evaluation.limit,
            "temperature": evaluation.temperature,
            "n": evaluation.n_for(job.run),
        }
        recorded = {
            "n_problems": result["n_problems"],
            "problems listed": len(result["per_problem"]),
            "temperature": result["params"].get("temperature"),
            "n": result["n"],
        }
        differ = [name for name in expected if recorded[name] != expected[name]]
        if differ:
            raise UserError(
                f"--report-only: {path} records {', '.join(f'{k} {recorded[k]!r}' for k in differ)} where the study "
                f"scores {evaluation.split} at {', '.join(f'{k} {expected[k]!r}' for k in differ)}; score it again "
                "(remove it and run the study without --report-only)"
            )
        # the settings it was scored with (sampling, task, limit, dtype), as a resumed study checks them; the model is
        # checked by its fingerprint below (its recorded name is a path of the machine that scored it, or a hash)
        plan = _evaluation_plan(job, folder, study, options)["settings"]
        scored = (result.get("study_evaluation") or {}).get("settings")
        differ = [k for k in plan if k != "model" and isinstance(scored, dict) and scored.get(k) != plan[k]]
        if differ:
            raise UserError(
                f"--report-only: {path} was scored with another {differ[0]} ({scored.get(differ[0])!r}, this study: "
                f"{plan[differ[0]]!r}); score it again (remove it and run the study without --report-only)"
            )
        raw = job.baseline is not None and job.baseline.raw_base
        model = str(folder) if job.arm is not None else ("the raw base" if raw else "the base")
        scored = [(path, result["model_fingerprint"])]
        validation = evaluation_file(folder, study.validation)
        if validation != path and validation.is_file():  # the pick's score, drawn from the same weights
            with contextlib.suppress(OSError, ValueError):
                record = json.loads(validation.read_text())
                if isinstance(record, dict) and "model_fingerprint" in record:
                    scored.append((validation, record["model_fingerprint"]))
        for where, fingerprint in scored:
            seen = fingerprints.setdefault(model, (where, fingerprint))
            if seen[1] != fingerprint:
                raise UserError(
                    f"--report-only: {where} was scored on model fingerprint {fingerprint} but {seen[0]} on "
                    f"{seen[1]}: both are {model}'s results; score it again on the study's model"
                )


def rehearsal_model(study, tokenizer: str | None, out: Path) -> str:
    """The --quick rehearsal's base: a tiny random model (grpo_ext.experiments.study.rehearsal) with the base's
    tokenizer pipeline and chat template (or `tokenizer`'s), retrained on the study's task text (its baselines' prompts
    too) to a small vocabulary. Kept in outputs/tiny_models/ (in the output folder when `tokenizer` is given)."""
    from grpo_ext.experiments.study.rehearsal import REHEARSAL_VOCAB, tiny_model_like
    from grpo_ext.experiments.study.runs import method_config_path, task_of
    from grpo_ext.tasks import get_task

    name, kwargs = task_of(method_config_path(study.arms[0].method, study.configs_dir))
    tasks = [get_task(name, **kwargs), *(get_task(name, **{**kwargs, **b.task_kwargs}) for b in study.baselines)]
    source = tokenizer or study.base
    folder = out / "rehearsal_model" if tokenizer else TINY_MODELS / f"{Path(str(source)).name}-{REHEARSAL_VOCAB}"
    path = str(tiny_model_like(source, folder, tasks=tasks))
    print(
        f"--quick: rehearsing on {path} (random weights; {Path(str(source)).name}'s tokenizer and chat template, "
        f"retrained on the task's text to <= {REHEARSAL_VOCAB} tokens)",
        flush=True,
    )
    return path


def check_values_once(study, path) -> None:
    """No search axis of the study lists one value twice (`[3.0e-4, 0.0003]` is one rate): it would be trained twice
    and counted as two settings."""
    from grpo_ext.errors import UserError

    axes = [("learning_rates", study.learning_rates)]
    axes += [(f"arms.{arm.name}.grid.{axis}", values) for arm in study.arms for axis, values in arm.grid.items()]
    for where, values in axes:
        repeated = sorted({v for v in values if list(values).count(v) > 1})
        if repeated:
            raise UserError(f"{path}: {where} repeats {repeated} (a value given twice is trained twice); each once")


def main(argv: list[str]) -> dict:
    args = build_parser().parse_args(argv)
    from grpo_ext.errors import UserError
    from grpo_ext.experiments.study.config import load_study
    from grpo_ext.experiments.study.options import StudyOptions
    from grpo_ext.io import portable_path
    from grpo_ext.model_paths import resolve_model_path

    study = load_study(args.study)
    check_values_once(study, args.study)
    # every flag is checked before anything is built, and --estimate prices what the flags select
    if args.jobs < 1:
        raise UserError(f"--jobs: must be >= 1, got {args.jobs}")
    rehearsal = args.quick and not args.model and study.base != "embedded"
    if args.rehearsal_tokenizer and not rehearsal:
        raise UserError(
            "--rehearsal-tokenizer: only with --quick on a study whose base is not the embedded model (and no --model)"
        )
    if args.quick:
        study = study.trimmed(values_per_axis=2, seeds=2)
        # fewer problems and samples, written into the study so its report says what was scored; a validation metric
        # these samples cannot report fails here, before any training
        sizes = QUICK_REHEARSAL_EVALUATION if rehearsal else QUICK_EVALUATION
        study.validation, study.test = (replace(e, **sizes) for e in (study.validation, study.test))
    if args.arms:
        signal = study.signal
        study = study.only([a.strip() for a in args.arms.split(",") if a.strip()])
        if signal is not None and study.signal is None:
            print(f"--arms: the signal's arm {signal.arm} is not run; no learning signal measured", flush=True)
    if args.model:
        study.base = args.model
        resolve_model_path(study.base)  # a missing base model fails before any training
    if args.estimate:
        from grpo_ext.experiments.study.budget import estimate, render_estimate

        result = estimate(study)
        print(render_estimate(result))
        # the spend of a study under way, in the folder named (the default folder holds another study's runs)
        if args.out is not None and (Path(args.out, "search.json").is_file() or Path(args.out, "runs").is_dir()):
            from grpo_ext.experiments.study.spent import render_spent, spent

            print(f"\nMeasured in {args.out} (one core a job; see grpo_ext.experiments.study.spent):\n")
            print(render_spent(spent(study, args.out), result))
        return {"estimate": result}
    args.out = args.out or "results/compare"
    # the command that reproduces the report, as a reader on another machine types it (repository-relative paths)
    command = "python scripts/run_methods.py " + shlex.join(
        portable_path(a) if a.startswith("/") else a for a in argv if a not in ("--no-progress", "--report-only")
    )
    if args.report_only:
        options = StudyOptions(base=study.base, configs=str(study.configs_dir), quick=args.quick, progress=False)
        return report_only(study, Path(args.out), options, command)
    if rehearsal:  # a rehearsal of a real study: a tiny model with its tokenizer, retrained on the task's text
        study.base = rehearsal_model(study, args.rehearsal_tokenizer, Path(args.out))
    resolve_model_path(study.base)  # a missing base model fails before any training
    options = StudyOptions(
        base=study.base,
        configs=str(study.configs_dir),
        quick=args.quick,
        progress=not (args.no_progress or args.quick),
        quick_flags=QUICK_COMMON,
        quick_method_flags=quick_method_flags(args.quick and rehearsal),
    )
    from grpo_ext.experiments.study.runs import check_arms, check_stop_support
    from grpo_ext.run_folder import OutputFolder

    if args.start_only and study.start is None:
        raise UserError(f"--start-only: {args.study} has no `start` section")
    for note in check_stop_support(study, options):  # before any run: a stop the harness cannot honour fails here
        print(note, flush=True)
    check_arms(study, args.study, options)  # every arm's run parses, before any folder is made or budget spent
    # --out: new, empty or a study's (a folder of other files is refused, never written into), one study at a time
    with OutputFolder(args.out, writer="scripts/run_methods.py", field_name="--out", adopt=is_study_folder) as folder:
        return run_study(study, args, options, folder.folder, command)


def is_study_folder(out: Path) -> bool:
    """Whether `out`, without the record of `grpo_ext.run_folder`, is a study's from before it: it holds what only a
    study writes there (its search.json, a run_methods.json, runs/, signal.json, start/, a rehearsal model)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        if {"picks", "test_seeds"} <= json.loads((out / "search.json").read_text()).keys():
            return True
    written = ("run_methods.json", "signal.json", "runs", "start", "rehearsal_model")
    return any((out / name).exists() for name in written)


def run_study(study, args, options, out: Path, command: str) -> dict:
    """The study's stages (the module's doc) in `out`, which `main` holds; returns the picks, scores, report paths."""
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


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    from grpo_ext.cli import run_cli

    run_cli(main, sys.argv[1:])
