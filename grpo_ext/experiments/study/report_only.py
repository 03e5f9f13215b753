"""``scripts/run_methods.py --report-only``: the report of a finished study rewritten from what its runs left in the
output folder (their JSON records, what is committed: no weights needed), after checking those records are the
study's: its search.json (the same seeds and validation, and the picks its validation records make), every test
result the report reads (a result of the study's problems, temperature and samples, one model fingerprint a model),
and every run and evaluation as a resumed study checks them (`runs.check_done`: each run's command, base included,
each evaluation's settings and run). Nothing is trained, sampled or scored; a missing or wrong file is named."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from grpo_ext.experiments.study.stages import write_reports

if TYPE_CHECKING:
    from grpo_ext.experiments.study.options import StudyOptions

__all__ = ["check_picks", "check_same_study", "check_test_results", "recorded_start", "report_only"]


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
    from grpo_ext.experiments.study.runs import Job, check_done, evaluation_file, job_dir
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
    # every run and evaluation the report reads, as a resumed study checks it (another base's run, an evaluation of
    # another run's folder), the search's too; then the picks those validation records make
    options = recorded_start(study, out, options)
    validation = [Job(None, None, None, study.validation), *(Job(None, None, None, study.validation, b) for b in
                  study.baselines)]  # fmt: skip
    validation += [Job(arm, setting, seed, study.validation) for arm, setting, seed in study.searched(out, picks)]
    for job in [*jobs, *validation]:
        check_done(job, out, study, options)
    check_picks(study, out, picks, found)
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
    from grpo_ext.errors import read_json_object

    return read_json_object(path, "--report-only", what)


def recorded_start(study, out: Path, options: StudyOptions) -> StudyOptions:
    """`options` as the study's runs took them, from its start's record (``<out>/start/start.json``, checked to be of
    the study's start) and nothing built: the start named by its hash, the raw base kept for the `raw_base` baselines,
    the start's prompts skipped. A study without a `start`: `options` as they are."""
    from dataclasses import replace

    from grpo_ext.errors import UserError
    from grpo_ext.experiments.study.runs import quick_flags
    from grpo_ext.experiments.study.start import START_RECORD, start_identity, start_record

    if study.start is None:
        return options
    record = start_record(study.start, options.base, options.configs, out, quick_flags(study.start.method, options))
    if record is None:
        raise UserError(f"--report-only: {out / 'start' / START_RECORD} is missing: the study's start was not made")
    return replace(
        options,
        base=str(out / "start" / "model"),
        base_identity=start_identity(record),
        raw_base=options.base,
        train_offset=int(record["train_prompts"]["size"]),
    )


def check_picks(study, out: Path, picks: dict, found: Path) -> None:
    """The picks `found` (search.json) records are the ones the search's validation records make (`stage_picks`, as
    the search made them): a pick edited by hand, or a search record of other runs, is refused naming the arm."""
    from grpo_ext.errors import UserError
    from grpo_ext.experiments.study.stages import stage_picks

    first = stage_picks(study, out, None)[2]
    derived = {**first, **stage_picks(study, out, first)[2]}
    for arm in study.arms:
        if derived[arm.name].slug != picks[arm.name].slug:
            raise UserError(
                f"--report-only: {found} picks {picks[arm.name].slug} for arm {arm.name!r} where its validation "
                f"records pick {derived[arm.name].slug}: a pick is the search's, never edited; run the study without "
                "--report-only to pick again"
            )


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
    from grpo_ext.experiments.study.runs import evaluation_file, job_dir

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
