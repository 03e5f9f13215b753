"""Running a study's jobs: train a run (if its folder is not complete) and score it on a split, a few at a time.

A job is (arm, setting, seed, evaluation); the base model is the job with no arm. Each job runs in its own worker
process (``jobs`` at a time), so two runs share the 2 cores of a small machine and a crash or a memory peak stays
in one run. Every output is written atomically and checked for before any work: a job whose files exist is a no-op.
"""

from __future__ import annotations

import json
import shlex
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from grpo_ext.methods.study.config import Arm, Evaluation, Setting, Study, evaluation_ks
from grpo_ext.methods.study.method_configs import method_config_path, task_of

__all__ = ["Job", "evaluation_file", "method_config_path", "quick_flags", "read_score", "run_jobs", "task_of"]


@dataclass(frozen=True)
class Job:
    arm: Arm | None  # None: the base model
    setting: Setting | None
    seed: int | None
    evaluation: Evaluation

    @property
    def name(self) -> str:
        if self.arm is None:
            return f"base ({self.evaluation.split})"
        return f"{self.arm.name}/{self.setting.slug}/seed{self.seed} ({self.evaluation.split})"


def job_dir(job: Job, out: Path, study: Study) -> Path:
    if job.arm is None:
        return Path(out) / "base"
    return study.run_dir(out, job.arm, job.setting, job.seed)


def evaluation_file(folder: Path, evaluation: Evaluation) -> Path:
    return Path(folder) / f"{evaluation.split}.json"


def read_score(job: Job, out: Path, study: Study) -> float:
    """The job's evaluation metric (e.g. validation pass@1) from its results file."""
    path = evaluation_file(job_dir(job, out, study), job.evaluation)
    result = json.loads(path.read_text())
    metric, _, k = job.evaluation.metric.partition("@")
    return float(result[f"{metric}@k"][k])


def quick_flags(method: str, options: dict) -> list[str]:
    """The flags ``--quick`` adds to a run of `method` (its runner's tiny budget); none without ``--quick``."""
    from grpo_ext.methods import get_method

    if not options["quick"]:
        return []
    runner = get_method(method).runner
    return shlex.split(options["quick_flags"]) + shlex.split(options["quick_method_flags"][runner])


def _train(job: Job, folder: Path, study: Study, options: dict) -> None:
    from grpo_ext.methods import run_method
    from grpo_ext.methods.cost import COST_FILE

    if (folder / COST_FILE).is_file() and any(folder.glob("*.safetensors")):
        return  # trained; a folder whose weights were not kept (only its JSON records are committed) trains again
    print(f"=== training {job.name} into {folder}", flush=True)
    run_method(train_argv(job.arm, job.setting, job.seed, folder, options))


def train_argv(arm: Arm, setting: Setting, seed: int, folder: Path, options: dict) -> list[str]:
    """The method runner's command line of one run of the study."""
    config = method_config_path(arm.method, options["configs"])
    argv = ["--config", str(config), "--seed", str(seed), "--output_dir", str(folder)]
    argv += ["--model_name_or_path", options["base"], *arm.flags(), *setting.flags()]
    if not options["progress"]:
        argv += ["--disable_tqdm", "true"]
    return argv + quick_flags(arm.method, options)


def check_arms(study: Study, study_file: str, options: dict) -> None:
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


def _evaluate(job: Job, folder: Path, study: Study, options: dict) -> None:
    from grpo_ext.evaluation.backends import load_backend
    from grpo_ext.evaluation.cache import task_id_for
    from grpo_ext.evaluation.harness import evaluate_model
    from grpo_ext.evaluation.sampling import SamplingParams
    from grpo_ext.io import atomic_write_json
    from grpo_ext.methods.cost import COST_FILE, read_json_file
    from grpo_ext.tasks import get_task

    target = evaluation_file(folder, job.evaluation)
    if target.is_file():
        return
    evaluation = job.evaluation
    limit, n, max_new_tokens = evaluation.limit, evaluation.n, evaluation.max_new_tokens
    method = job.arm.method if job.arm else study.arms[0].method
    task_name, task_kwargs = task_of(method_config_path(method, options["configs"]))
    task = get_task(task_name, **task_kwargs)
    params = SamplingParams(
        n=n, temperature=evaluation.temperature, max_new_tokens=max_new_tokens, seed=0, batch_size=16
    )
    model = str(folder) if job.arm else options["base"]
    ks = evaluation_ks(n)
    print(f"=== evaluating {job.name}", flush=True)
    result = evaluate_model(
        load_backend(model, "transformers"),
        task,
        params,
        ks,
        folder / f"{evaluation.split}_samples.jsonl",
        limit,
        split=evaluation.split,
        task_id=task_id_for(task_name, evaluation.split, task_kwargs),
        progress=options["progress"],
    )
    cost = read_json_file(folder, COST_FILE) if job.arm else None
    if cost is not None:
        result["training_cost"] = cost
    atomic_write_json(target, result)


def _run_job(job: Job, out: Path, study: Study, options: dict) -> str:
    import torch

    torch.set_num_threads(1)  # one core per job: two jobs fill two cores without contention
    folder = job_dir(job, out, study)
    if job.arm is not None:
        _train(job, folder, study, options)
    else:
        folder.mkdir(parents=True, exist_ok=True)
    _evaluate(job, folder, study, options)
    return job.name


def run_jobs(jobs: list[Job], out: Path, study: Study, options: dict, workers: int) -> None:
    """Run every job not yet done, ``workers`` at a time (each in a fresh process); re-raise the first failure."""
    pending = [j for j in jobs if not evaluation_file(job_dir(j, out, study), j.evaluation).is_file()]
    if not pending:
        return
    if workers == 1:
        for job in pending:
            _run_job(job, out, study, options)
        return
    import multiprocessing

    # A fresh process per job (max_tasks_per_child=1: no memory or global state carried from one run to the next),
    # forked from a server that has already imported torch, transformers and TRL (seconds a job otherwise).
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    context = multiprocessing.get_context(method)
    if method == "forkserver":
        context.set_forkserver_preload(["grpo_ext.methods.runners", "grpo_ext.evaluation.harness"])
    with ProcessPoolExecutor(max_workers=workers, mp_context=context, max_tasks_per_child=1) as pool:
        futures = [pool.submit(_run_job, job, out, study, options) for job in pending]
        for future in futures:
            print(f"done: {future.result()}", flush=True)
