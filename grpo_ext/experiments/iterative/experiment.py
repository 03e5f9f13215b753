"""The experiment: every arm of every seed, resumable, ``workers`` runs at a time, one combined report.

Jobs: a seed's iteration 0 (:mod:`grpo_ext.experiments.iterative.iteration_zero`), then each of its arms
(:class:`ArmRun`). A job is a process of its own when ``workers > 1`` (spawned: each imports torch once and uses the
thread count its environment gives, ``OMP_NUM_THREADS=1`` on a shared CPU), else runs in this one. Every job saves its
state after each iteration, so a killed experiment started again with the same command redoes no finished iteration. The
report is rewritten whenever a job ends.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import asdict
from pathlib import Path

from grpo_ext.batching import get_zero_std_strategy, prompts_drawn
from grpo_ext.errors import UserError
from grpo_ext.experiments.iterative.args import IterativeArguments
from grpo_ext.experiments.iterative.arms import USES_RM
from grpo_ext.experiments.iterative.iteration_zero import START_DIR, START_STATE_FILE
from grpo_ext.experiments.iterative.state import LOOP_STATE_FILE, load_state
from grpo_ext.experiments.workers import end_with
from grpo_ext.model_paths import model_record_name

__all__ = ["Experiment", "run_experiment", "seed_dir"]

#: GRPO settings that shape a run: a saved run only continues with the same values.
_GRPO_FIELDS = (
    "max_steps",
    "learning_rate",
    "beta",
    "num_generations",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "max_completion_length",
    "temperature",
    "advantage_mode",
    "loss_type",
    "step_separator",
    # with the batch fields above, what each iteration's slice of the pool is (measure.Setting.iteration_prompts)
    "steps_per_generation",
    "num_iterations",
    "generation_batch_size",
)
#: The policy's ModelConfig fields that shape a run (a LoRA policy: a fresh adapter each iteration, merged after it).
_MODEL_FIELDS = ("use_peft", "lora_r", "lora_alpha", "lora_dropout", "dtype")
#: GRPO settings that shape a run, added after the first runs were saved.
_LATER_GRPO_FIELDS = ("stop_strings", "top_k")
#: Fields added after the first runs were saved, and the value those runs had: left out of a snapshot at it.
_LATER_DEFAULTS = {
    "rm_lora_r": 0,
    "rm_lora_alpha": 32,
    "rm_dtype": "float32",
    "start_sha256": None,
    "use_peft": False,
    "lora_r": 16,
    "lora_alpha": 32,
    "lora_dropout": 0.05,
    "dtype": "float32",
    "stop_strings": None,
    "top_k": 0,
}
#: IterativeArguments fields that may change between a run and its resume.
# (expectations and the budget's planning rates judge and price runs; they never change one)
_FREE_FIELDS = ("resume", "report_dir", "iterations", "arms", "seeds", "workers", "expectations", "budget")


def seed_dir(run_dir: Path, seed: int) -> Path:
    return run_dir / f"seed_{seed}"


def check_start(folder: Path, sha256: str | None) -> None:
    """The policy start is the model ``sha256`` names (a study start's ``model_sha256``, hashed as the study hashes
    it: one sha256 over the folder's safetensors files), else a `UserError` before any job: the arms would start
    from another model than the one the experiment is about. A study start (a ``start.json`` beside its folder) must
    be named: its record's hash is printed to copy into the config, never trusted in its place (a start rebuilt
    later writes a new record)."""
    from grpo_ext.experiments.study.start import START_RECORD, weights_hash  # the study's hash, not a second one

    record = folder.parent / START_RECORD
    if sha256 is None:
        if record.is_file():
            recorded = _read_json(record).get("model_sha256")
            raise UserError(
                f"start_sha256: {folder} is a study start ({record}); name it in the config: "
                f"`start_sha256: {recorded}` (its model_sha256), so that another start is refused"
            )
        return
    found = weights_hash(folder)
    if found != sha256:
        raise UserError(
            f"start_sha256: {folder} holds weights with sha256 {found}, the config names {sha256} (the start's "
            "start.json model_sha256): another start; rebuild the one named (make real-study) or fix the config"
        )


def check_report_dir(report_dir: Path, run_dir: Path) -> None:
    """The experiment's report folder lies in no seed folder of ``run_dir``: there each run keeps its state, its
    iterations and its own report (``seed_<s>/<arm>/report``, the same file names), which the combined report would
    overwrite (and a resume would delete, inside an ``iter_<k>``). A `UserError` naming the field, before any job."""
    report_dir, run_dir = Path(report_dir).resolve(), Path(run_dir).resolve()
    if run_dir in report_dir.parents:
        seed_folder = run_dir / report_dir.relative_to(run_dir).parts[0]
        if seed_folder.name.startswith("seed_") and seed_folder.name[5:].lstrip("-").isdigit():  # seed_dir's names
            raise UserError(
                f"report_dir: {report_dir} lies inside {seed_folder}, where the runs keep their state, iterations and "
                f"own reports (seed_<s>/<arm>/report): the experiment's report would overwrite them; choose a folder "
                f"outside the seed folders (default: {run_dir / 'report'})"
            )


def _read_json(path: Path) -> dict:
    import json

    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise UserError(f"{path}: cannot read it ({err})") from None
    return value if isinstance(value, dict) else {}


class Experiment:
    """Checks the settings once (before any job starts) and knows where every job keeps its state."""

    def __init__(self, it_args: IterativeArguments, training_args, model_args):
        from grpo_ext.advantages import get_gradient_coefficient
        from grpo_ext.experiments.iterative.measure import Setting
        from grpo_ext.policy_loading import policy_init

        if any(getattr(model_args, f, False) for f in ("load_in_4bit", "load_in_8bit")):
            raise UserError(
                "load_in_4bit/load_in_8bit: the iterative loop resets the reference to the full policy saved after "
                "each iteration; run it in full precision (use_peft: a fresh LoRA each iteration, merged after it)"
            )
        mode = training_args.advantage_mode
        reads_steps = get_gradient_coefficient(mode).needs_step_rewards
        if it_args.reward_model_type == "outcome" and reads_steps:
            raise UserError(
                f"advantage_mode: `{mode}` needs step rewards, which only reward_model_type: process gives in the "
                "iterative loop"
            )
        if it_args.reward_model_type == "process" and not reads_steps:  # before any job (policy.py refuses it too)
            raise UserError(
                f"advantage_mode: reward_model_type process feeds step scores to the advantages, but `{mode}` reads "
                "none; set a mode that reads step rewards (e.g. process)"
            )
        if get_zero_std_strategy(training_args.zero_std_groups).draws_prompts:
            raise UserError(
                f"zero_std_groups: `{training_args.zero_std_groups}` is not supported by the iterative loop: each "
                "iteration trains on its own slice of the pool once, and its rounds would draw that slice's prompts "
                "again; use a strategy that draws none (e.g. `skip`)"
            )
        seeds = it_args.seed_list if it_args.seed_list is not None else [int(training_args.seed)]
        # the task, its splits and verifier, checked before any job; the pool as loaded, not the size asked
        pool = Setting(it_args, training_args, seeds[0]).pool
        drawn = prompts_drawn(training_args)
        if drawn is not None and len(pool) < it_args.iterations * drawn:
            raise UserError(
                f"train_size: each of the {it_args.iterations} iterations trains on {drawn} prompts of its own (no "
                f"prompt twice in a run), so the pool needs >= {it_args.iterations * drawn}; the task's train split "
                f"gives {len(pool)} (train_size {it_args.train_size}, train_offset {it_args.train_offset})"
            )
        base_id, _, _ = policy_init(model_args, training_args)  # also sets the trainer's model_init_kwargs
        if not Path(base_id).is_dir():
            raise UserError(f"model_name_or_path: the iterative loop needs a local model folder, got {base_id}")
        check_start(Path(base_id), it_args.start_sha256)
        self.it_args, self.training_args, self.model_args = it_args, training_args, model_args
        self.base = str(Path(base_id).resolve())
        self.seeds = seeds
        self.arms = it_args.arm_list
        self.run_dir = Path(training_args.output_dir).resolve()
        self.report_dir = Path(it_args.report_dir).resolve() if it_args.report_dir else self.run_dir / "report"
        check_report_dir(self.report_dir, self.run_dir)

    def config(self, seed: int) -> dict:
        """The settings a resumed run of ``seed`` must share with the saved one."""
        snapshot = {k: v for k, v in asdict(self.it_args).items() if k not in _FREE_FIELDS}
        snapshot.update({f: getattr(self.training_args, f) for f in _GRPO_FIELDS})
        snapshot.update({f: getattr(self.model_args, f, None) for f in _MODEL_FIELDS})
        snapshot.update({f: getattr(self.training_args, f, None) for f in _LATER_GRPO_FIELDS})
        # a field added after runs were saved is left out at its default, so those runs still resume
        snapshot = {k: v for k, v in snapshot.items() if k not in _LATER_DEFAULTS or v != _LATER_DEFAULTS[k]}
        # the base as every clone names it (`embedded`, not this clone's folder): the run resumes from another clone
        return {**snapshot, "base": model_record_name(self.base), "seed": seed}

    def states(self) -> dict:
        """``{arm: {seed: state}}`` of the runs saved so far (a seed's iteration 0 alone counts as a run at 0)."""
        out: dict = {}
        for seed in self.seeds:
            start = load_state(seed_dir(self.run_dir, seed) / START_DIR, START_STATE_FILE)
            for arm in self.arms:
                state = load_state(seed_dir(self.run_dir, seed) / arm, LOOP_STATE_FILE)
                if state is None and start is not None:
                    state = {"config": start["config"], "iteration": 0, "history": [{**start["row"], "arm": arm}]}
                if state is not None:
                    out.setdefault(arm, {})[seed] = state
        return out

    def write_report(self) -> Path:
        from grpo_ext.experiments.iterative.arms_report import write_experiment_report

        return write_experiment_report(self.states(), self.report_dir, self.it_args, self.arms, self.seeds)

    # ---- jobs ----------------------------------------------------------------------------------------------------
    def jobs_after_start(self, seed: int) -> list[tuple[str, int]]:
        """The arms of ``seed``, longest first (the RM-retraining arm, then the other RM arm, then the verifier)."""
        return [(arm, seed) for arm in sorted(self.arms, key=lambda a: (a not in USES_RM, a != "iterative"))]

    def run(self) -> dict:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        workers = min(self.it_args.workers, len(self.seeds) * len(self.arms))
        if workers <= 1:
            for seed in self.seeds:
                run_job(self, "start", seed)
                for arm, _ in self.jobs_after_start(seed):
                    run_job(self, arm, seed)
                    self.write_report()
        else:
            self._run_parallel(workers)
        self.write_report()
        print(
            f"[iterative] {len(self.seeds)} seed(s) x {len(self.arms)} arm(s) in {time.perf_counter() - started:.0f} s"
        )
        return self.states()

    def _run_parallel(self, workers: int) -> None:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(
            max_workers=workers, mp_context=context, initializer=_worker_start, initargs=(os.getpid(),)
        ) as pool:
            pending = {pool.submit(run_job, self, "start", seed): ("start", seed) for seed in self.seeds}
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    kind, seed = pending.pop(future)
                    future.result()  # a failed job stops the experiment (finished iterations stay saved)
                    if kind == "start":
                        for arm, _ in self.jobs_after_start(seed):
                            pending[pool.submit(run_job, self, arm, seed)] = (arm, seed)
                    else:
                        self.write_report()


def _worker_start(parent_pid: int) -> None:
    """A worker's initializer: no weight-loading progress bars, and the worker ends with the experiment's process
    (a restarted experiment never shares its folders with the orphans of a killed one)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    end_with(parent_pid)


def run_job(experiment: Experiment, kind: str, seed: int) -> None:
    """A seed's iteration 0 (``kind="start"``) or one arm's iterations (``kind`` = the arm)."""
    from grpo_ext.experiments.iterative.iteration_zero import run_start
    from grpo_ext.experiments.iterative.loop import ArmRun
    from grpo_ext.experiments.iterative.measure import Setting

    e = experiment
    lora = getattr(e.model_args, "use_peft", False)
    setting = Setting(e.it_args, e.training_args, seed, e.model_args.dtype if lora else None)
    folder = seed_dir(e.run_dir, seed)
    # --resume false starts a seed's iteration 0 afresh once, in its own job; its arms then build on that one
    start = run_start(setting, e.base, folder, e.config(seed), e.it_args.resume or kind != "start")
    if kind != "start":
        ArmRun(setting, e.training_args, kind, e.base, folder, start, e.config(seed), e.model_args).run()


def run_experiment(it_args: IterativeArguments, training_args, model_args) -> dict:
    """Run (or resume) every arm of every seed; returns ``{arm: {seed: state}}`` (each state's ``history`` holds
    one row per iteration) and writes the combined report."""
    return Experiment(it_args, training_args, model_args).run()
