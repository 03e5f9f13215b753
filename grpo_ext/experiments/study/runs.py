"""Running a study's jobs: train a run (if its folder is not complete) and score it on a split, a few at a time.

A job is (arm, setting, seed, evaluation); the base model is the job with no arm, a baseline (the base at another
prompt, :class:`~grpo_ext.experiments.study.spec.Baseline`) the job with no arm and a baseline. Each job runs in its own
worker process (``jobs`` at a time), so two runs share the 2 cores of a small machine and a crash or a memory peak
stays in one run. Every output is written atomically and checked for before any work: a job whose files exist is a
no-op.
"""

from __future__ import annotations

import os
import shlex
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from grpo_ext.errors import UserError
from grpo_ext.evaluation.registry import headline_at
from grpo_ext.experiments.study.config import Arm, Baseline, Evaluation, Setting, Study, evaluation_ks
from grpo_ext.experiments.study.expectations import BASE
from grpo_ext.experiments.study.method_configs import method_config_path, task_of
from grpo_ext.experiments.study.options import StudyOptions
from grpo_ext.experiments.study.provenance import (
    check_evaluation,
    check_training,
    evaluation_settings,
    finished_run,
    record_training,
    training_record,
)
from grpo_ext.experiments.study.resume import checkpoint_flags, clear_checkpoints, resume_point
from grpo_ext.experiments.workers import end_with

__all__ = [
    "Job",
    "check_stop_support",
    "evaluation_file",
    "evaluation_stops",
    "method_config_path",
    "quick_flags",
    "read_score",
    "run_jobs",
    "stop_kwargs",
    "task_of",
]


@dataclass(frozen=True)
class Job:
    arm: Arm | None  # None: the base model (or a baseline)
    setting: Setting | None
    seed: int | None
    evaluation: Evaluation
    baseline: Baseline | None = None  # with no arm: the base at the baseline's prompt

    @property
    def run(self) -> str:
        """The run's name in the study (``Evaluation.n_for``, the report): the arm, the baseline or ``base``."""
        return self.arm.name if self.arm else (self.baseline.name if self.baseline else BASE)

    @property
    def name(self) -> str:
        if self.arm is None:
            return f"{self.run} ({self.evaluation.split})"
        return f"{self.arm.name}/{self.setting.slug}/seed{self.seed} ({self.evaluation.split})"


def job_dir(job: Job, out: Path, study: Study) -> Path:
    if job.baseline is not None:
        return Path(out) / "baselines" / job.baseline.name
    if job.arm is None:
        return Path(out) / "base"
    return study.run_dir(out, job.arm, job.setting, job.seed)


def evaluation_stops(evaluation: Evaluation, task) -> tuple[str, ...]:
    """The strings the evaluation cuts samples at: its own `stop`, or the task's (`Task.stop_strings`)."""
    return tuple(evaluation.stop) if evaluation.stop is not None else tuple(getattr(task, "stop_strings", ()))


def stop_kwargs(stops: tuple[str, ...]) -> dict:
    """``SamplingParams`` keyword arguments that cut samples at `stops`: ``{"stop": stops}`` when this harness's
    sampler takes stop strings (``SamplingParams.stop``, the harness issue's), ``{}`` when there are none to cut at.
    A `UserError` when there are stops and the sampler cannot honour them (:func:`check_stop_support` says it first)."""
    import dataclasses

    from grpo_ext.sampler.sampling import SamplingParams

    if not stops:
        return {}
    if "stop" not in {f.name for f in dataclasses.fields(SamplingParams)}:
        raise UserError(
            f"the study cuts samples at {list(stops)} (its evaluation's `stop`, default the task's stop strings), "
            "and this harness's SamplingParams has no `stop`; set `stop: []` in the study's validation and test to "
            "evaluate without"
        )
    return {"stop": tuple(stops)}


def check_stop_support(study: Study, options: StudyOptions) -> list[str]:
    """Before any run: every evaluation's stop strings can be honoured (else a `UserError` naming the fix). With
    ``--quick`` (a rehearsal of the plumbing) an unsupported stop is dropped with a note instead; the notes are
    returned."""
    from grpo_ext.tasks import get_task

    notes = []
    task_name, task_kwargs = task_of(method_config_path(study.arms[0].method, options.configs))
    task = get_task(task_name, **task_kwargs)
    for evaluation in (study.validation, study.test):
        try:
            stop_kwargs(evaluation_stops(evaluation, task))
        except UserError as err:
            if not options.quick:
                raise
            notes.append(f"--quick: {evaluation.split} evaluated without stop strings ({err})")
    return notes


def evaluation_file(folder: Path, evaluation: Evaluation) -> Path:
    return Path(folder) / f"{evaluation.split}.json"


def read_score(job: Job, out: Path, study: Study) -> float:
    """The job's evaluation metric (e.g. validation pass@1) from its results file; a file without it is named."""
    from grpo_ext.errors import read_json_object

    path = evaluation_file(job_dir(job, out, study), job.evaluation)
    result = read_json_object(path, "--out", "an evaluation result of the study")
    metric, k = headline_at(job.evaluation.metric)  # checked when the study was read (`Evaluation.check_metric`)
    try:
        return float(result[metric.name][str(k)])
    except (KeyError, TypeError, ValueError):
        raise UserError(
            f"--out: {path} holds no {metric.name} at k = {k} (the study's metric): not an evaluation "
            "result of the study; remove it to score the run again"
        ) from None


def quick_flags(method: str, options: StudyOptions) -> list[str]:
    """The flags ``--quick`` adds to a run of `method` (its runner's tiny budget); none without ``--quick``."""
    from grpo_ext.methods import get_method

    if not options.quick:
        return []
    runner = get_method(method).runner
    return shlex.split(options.quick_flags) + shlex.split(options.quick_method_flags[runner])


def _train(job: Job, folder: Path, study: Study, options: StudyOptions) -> None:
    from grpo_ext.methods import run_method

    argv = train_argv(job.arm, job.setting, job.seed, folder, options)
    record = training_record(argv, method_config_path(job.arm.method, options.configs), options.base_identity)
    if _trained(folder):
        check_training(folder, record)  # a finished run of another command (--quick, another base) is never reused
        return  # trained; a folder whose weights were not kept (only its JSON records are committed) trains again
    print(f"=== training {job.name} into {folder}", flush=True)
    argv += _checkpointing(job, folder, record, study)  # before the record is written anew
    record_training(folder, record)
    run_method(argv)
    clear_checkpoints(folder)  # finished: its model and records are saved


def _checkpointing(job: Job, folder: Path, record: dict, study: Study) -> list[str]:
    """The run's checkpoint flags (:mod:`.resume`; not part of its record), and ``--resume_from_checkpoint`` when the
    folder holds a whole checkpoint of this command (else its checkpoints are removed: it trains from step 0)."""
    from grpo_ext.methods import get_method

    checkpoint = resume_point(folder, record, get_method(job.arm.method).online)
    clear_checkpoints(folder, keep=checkpoint)
    if checkpoint is None:
        return checkpoint_flags(study.checkpoint_steps)
    print(f"=== resuming {job.name} from step {checkpoint.name.split('-')[-1]} ({checkpoint})", flush=True)
    return [*checkpoint_flags(study.checkpoint_steps), "--resume_from_checkpoint", str(checkpoint)]


def _trained(folder: Path) -> bool:
    return finished_run(folder)  # weights, cost and a run record saying `complete`: a failed run trains again


def scored_folder(job: Job, study: Study) -> str | None:
    """The folder an arm's evaluation scores, relative to the study's output folder (None for the base and the
    baselines: their folder is their run's name, which the evaluation records)."""
    return job_dir(job, Path(), study).as_posix() if job.arm is not None else None


def check_done(job: Job, out: Path, study: Study, options: StudyOptions) -> None:
    """What an earlier sitting finished for ``job`` (its run, its evaluation) was made by this study's command and
    settings, else a `UserError` naming the folder (:mod:`grpo_ext.experiments.study.provenance`); run before any
    job, and by --report-only on every job it reads. A run's record is checked wherever its run is reused: trained,
    or scored (a folder whose weights were not kept, as committed, is reused through its evaluation)."""
    folder = job_dir(job, out, study)
    target = evaluation_file(folder, job.evaluation)
    if job.arm is not None and (_trained(folder) or target.is_file()):
        argv = train_argv(job.arm, job.setting, job.seed, folder, options)
        config = method_config_path(job.arm.method, options.configs)
        check_training(folder, training_record(argv, config, options.base_identity))
    if target.is_file():
        settings = _evaluation_plan(job, folder, study, options)["settings"]
        check_evaluation(target, settings, job.run, scored_folder(job, study))


def train_argv(arm: Arm, setting: Setting, seed: int, folder: Path, options: StudyOptions) -> list[str]:
    """The method runner's command line of one run of the study."""
    config = method_config_path(arm.method, options.configs)
    argv = ["--config", str(config), "--seed", str(seed), "--output_dir", str(folder)]
    argv += ["--model_name_or_path", options.base, *arm.flags(), *setting.flags()]
    if options.train_offset:  # the prompts the study's start trained on are no run's
        argv += ["--train_offset", str(options.train_offset)]
    if not options.progress:
        argv += ["--disable_tqdm", "true"]
    return argv + quick_flags(arm.method, options)


def check_arms(study: Study, study_file: str, options: StudyOptions) -> None:
    """Every arm's run parsed as its runner will parse it (its method config, overrides and first setting), before
    any training: a bad override value is one line naming the study file and the arm, not a failure minutes into
    the first run of that arm."""
    from grpo_ext.errors import UserError
    from grpo_ext.methods.config import parse_method_args

    for arm in study.arms:
        setting = arm.settings(study.learning_rates)[0]  # a rate_of arm's rate is one of these too
        try:
            parse_method_args(train_argv(arm, setting, study.seeds[0], Path("unused"), options))
        except UserError as err:
            raise UserError(f"{study_file}: arms.{arm.name}: {err}") from None


def _evaluation_plan(job: Job, folder: Path, study: Study, options: StudyOptions) -> dict:
    """How ``job`` is scored: its task, stop strings, sampling parameters, model and the settings it records."""
    from grpo_ext.evaluation.cache import task_id_for
    from grpo_ext.sampler.sampling import SamplingParams
    from grpo_ext.tasks import get_task

    evaluation = job.evaluation
    limit, n, max_new_tokens = evaluation.limit, evaluation.n_for(job.run), evaluation.max_new_tokens
    method = job.arm.method if job.arm else study.arms[0].method
    task_name, task_kwargs = task_of(method_config_path(method, options.configs))
    if job.baseline is not None:  # the base at the baseline's prompt (e.g. 8 worked examples)
        task_kwargs = {**task_kwargs, **job.baseline.task_kwargs}
    task = get_task(task_name, **task_kwargs)
    stops = evaluation_stops(evaluation, task)
    if options.quick:  # a rehearsal drops what this harness cannot honour (check_stop_support noted it)
        try:
            stop_kwargs(stops)
        except UserError:
            stops = ()
    params = SamplingParams(
        n=n,
        temperature=evaluation.temperature,
        max_new_tokens=max_new_tokens,
        seed=0,
        batch_size=16,
        **stop_kwargs(stops),
    )
    raw = job.baseline is not None and job.baseline.raw_base
    model = str(folder) if job.arm else (options.raw_base if raw else options.base)
    task_id = task_id_for(task_name, evaluation.split, task_kwargs)
    # an arm's model is its run (checked by its training record); the base is named by the study's --model, the
    # start by its hash
    identity = None if job.arm or raw else options.base_identity
    settings = evaluation_settings(
        "the run" if job.arm else model, params.key(), task_id, limit, evaluation.dtype, identity
    )
    return {"task": task, "stops": stops, "params": params, "model": model, "task_id": task_id, "settings": settings}


def _evaluate(job: Job, folder: Path, study: Study, options: StudyOptions) -> None:
    from grpo_ext.evaluation.backends import load_backend
    from grpo_ext.evaluation.harness import evaluate_model
    from grpo_ext.io import atomic_write_json
    from grpo_ext.methods.cost import COST_FILE, read_json_file

    target = evaluation_file(folder, job.evaluation)
    evaluation = job.evaluation
    plan = _evaluation_plan(job, folder, study, options)
    task, stops, params, model, task_id, settings = (
        plan[k] for k in ("task", "stops", "params", "model", "task_id", "settings")
    )
    limit, n = evaluation.limit, params.n
    if target.is_file():  # scored with other settings, another base or in another run's folder: never reused
        check_evaluation(target, settings, job.run, scored_folder(job, study))
        return
    ks = evaluation_ks(n)
    load = {}
    if evaluation.dtype == "bfloat16":  # as trained: bf16 base, the LoRA adapter beside it (a bf16 merge rounds it)
        import torch

        load = {"dtype": torch.bfloat16, "merge_adapter": False}
    print(f"=== evaluating {job.name}", flush=True)
    result = evaluate_model(
        load_backend(model, "transformers", **load),
        task,
        params,
        ks,
        folder / f"{evaluation.split}_samples.jsonl",
        limit,
        split=evaluation.split,
        task_id=task_id,
        progress=options.progress,
    )
    add_attributes(result, task, evaluation.split, limit)
    result["study_evaluation"] = {
        "run": job.run,
        "stop": list(stops),
        "dtype": evaluation.dtype,
        "n": n,
        "settings": settings,
    }
    cost = read_json_file(folder, COST_FILE) if job.arm else None
    if cost is not None:
        result["training_cost"] = cost
    atomic_write_json(target, result)


def add_attributes(result: dict, task, split: str, limit: int) -> None:
    """Each per-problem record's slice attributes (``attributes``: operation, operands, carry_borrow...) from the
    task, where the harness did not write them: the study's slice expectations read them. Problem ids are positions
    in the split, as the harness numbers them."""
    records = result.get("per_problem") or []
    if all("attributes" in r for r in records):
        return
    rows = task.load(split, limit)
    for record in records:
        if "attributes" not in record and str(record["problem_id"]).isdigit():
            record["attributes"] = task.problem_attributes(rows[int(record["problem_id"])])


def _run_job(job: Job, out: Path, study: Study, options: StudyOptions) -> str:
    import torch

    torch.set_num_threads(1)  # one core per job: two jobs fill two cores without contention
    folder = job_dir(job, out, study)
    if job.arm is not None:
        _train(job, folder, study, options)
    else:
        folder.mkdir(parents=True, exist_ok=True)
    _evaluate(job, folder, study, options)
    return job.name


def run_jobs(jobs: list[Job], out: Path, study: Study, options: StudyOptions, workers: int) -> None:
    """Run every job not yet done, ``workers`` at a time (each in a fresh process); re-raise the first failure. What
    is done must be this study's own (`check_done`, every job before the first one starts)."""
    for job in jobs:
        check_done(job, out, study, options)
    pending = [j for j in jobs if not evaluation_file(job_dir(j, out, study), j.evaluation).is_file()]
    if not pending:
        return
    if workers == 1:
        for job in pending:
            _run_job(job, out, study, options)
        return
    import multiprocessing

    # A fresh process per job (max_tasks_per_child=1: no memory or global state carried from one run to the next),
    # forked from a server that has already imported torch, transformers, TRL's trainers and PEFT (seconds a job
    # otherwise; grpo_ext.experiments.study.preload).
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    context = multiprocessing.get_context(method)
    if method == "forkserver":
        context.set_forkserver_preload(["grpo_ext.experiments.study.preload"])
    # Each worker ends with this process (grpo_ext.experiments.workers): a study killed mid-run leaves no worker
    # training on.
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        max_tasks_per_child=1,
        initializer=end_with,
        initargs=(os.getpid(),),
    ) as pool:
        futures = [pool.submit(_run_job, job, out, study, options) for job in pending]
        for future in futures:
            print(f"done: {future.result()}", flush=True)
