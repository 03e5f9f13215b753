"""A training run's record in its output folder, written the same way by every runner (scripts/train.py, the method
runners, the iterative loop) through `training_run`:

- `grpo_ext_run.json` (`grpo_ext.checkpoints.RUN_STATUS_FILE`): `running`, then `complete` or `failed`, with the
  trainer's `log_history` (`compact_log_history`: every logged step's loss, reward, reward_std, frac_reward_zero_std,
  completion lengths, kl, beta...), so the learning curve can be plotted from a committed record after the
  checkpoints are gone;
- the resolved config `grpo_ext_config.yaml` (`save_resolved_config`; read back by `resolved_config`): what was
  really run, in `{task, training, model}` sections.

Beside `grpo_ext.checkpoints` (what a checkpoint holds) and `grpo_ext.run_folder` (one run per folder). What a model
card says of the record is `grpo_ext.hub.training`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import yaml
from transformers import TrainerCallback

from grpo_ext.checkpoints import write_run_status
from grpo_ext.errors import UserError, one_line
from grpo_ext.io import atomic_write_text, portable_path

__all__ = [
    "CONFIG_FILE",
    "LOG_DIGITS",
    "TrainingRun",
    "compact_log_history",
    "resolved_config",
    "save_resolved_config",
    "sigterm_as_exit",
    "training_run",
]

#: The resolved config every training run writes into its output folder (`{task, training, model}` sections).
CONFIG_FILE = "grpo_ext_config.yaml"
#: Significant digits a logged float keeps in the run record: a learning curve reads the same, the record stays small.
LOG_DIGITS = 4
# Path-valued fields of the resolved config, recorded relative to the output folder or the repository.
_PATH_FIELDS = {"training": ("output_dir", "logging_dir", "resume_from_checkpoint"), "model": ("model_name_or_path",)}


# ---- the resolved config ---------------------------------------------------------------------------------------------


def resolved_config(checkpoint_dir: str | os.PathLike) -> dict | None:
    """The resolved config a run wrote next to `checkpoint_dir` (`grpo_ext_config.yaml`, or its parent's for a
    `checkpoint-N` folder); None if there is none."""
    folder = Path(checkpoint_dir)
    for candidate in (folder / CONFIG_FILE, folder.parent / CONFIG_FILE):
        if candidate.is_file():
            try:
                resolved = yaml.safe_load(candidate.read_text()) or {}
            except yaml.YAMLError as err:
                raise UserError(f"{candidate}: not valid YAML ({err})") from err
            if not isinstance(resolved, dict):
                raise UserError(f"{candidate}: expected a mapping with task/training/model sections")
            return resolved
    return None


def save_resolved_config(output_dir: str | os.PathLike, task_args, training_args, model_args) -> Path:
    """All three argument groups as one YAML, next to the model (what was really run). Paths are recorded relative to
    the output folder or the repository (the shipped base model as `embedded`, a real model by its name), so the
    record names no folder of the machine that ran it. ``task_args``: any dataclass holding the task fields
    (`grpo_ext.script_args.TaskFields`)."""
    from grpo_ext.model_paths import known_model_name

    task = dataclasses.asdict(task_args)
    task.pop("overwrite_output_dir", None)  # what happened to an earlier run's folder, not how this one trained
    resolved = {
        "task": task,
        "training": training_args.to_dict(),
        "model": {k: v for k, v in dataclasses.asdict(model_args).items()},
    }
    for section, fields in _PATH_FIELDS.items():
        for field in fields:
            value = resolved[section].get(field)
            if isinstance(value, str) and value:
                resolved[section][field] = known_model_name(value) or portable_path(value, base=output_dir)
    return atomic_write_text(
        Path(output_dir) / CONFIG_FILE, yaml.safe_dump(resolved, sort_keys=False, default_flow_style=False)
    )


# ---- the log history -------------------------------------------------------------------------------------------------


def _compact(value):
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return None  # JSON has no NaN: a null, which a plot reads back as a gap (float("nan") in numpy)
        if value.is_integer():
            return value  # counts logged as floats (num_tokens, total_flos) stay exact
        return float(f"{value:.{LOG_DIGITS}g}")
    if isinstance(value, dict):
        return {str(k): _compact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_compact(v) for v in value]
    try:  # numpy / torch scalars
        return _compact(value.item())
    except (AttributeError, ValueError):
        return str(value)


def compact_log_history(log_history: list[dict]) -> list[dict]:
    """TRL's ``trainer.state.log_history`` as the run record keeps it: every entry and key, floats rounded to
    :data:`LOG_DIGITS` significant digits (integral ones, counts such as ``num_tokens``, kept exact), NaN and
    infinities as null (strict JSON)."""
    return [_compact(entry) for entry in log_history]


# ---- the lifecycle ---------------------------------------------------------------------------------------------------


class TrainingRun:
    """What `training_run` yields: ``save_config()`` writes the resolved config now (before a model card that reads
    it); otherwise it is written when the block ends without an error. ``write_status(status, **info)`` records the
    run's status with its log history so far (main process only)."""

    def __init__(self, trainer, task_args, model_args, main_process: bool):
        self.trainer, self.task_args, self.model_args, self.main_process = trainer, task_args, model_args, main_process
        self.config_saved = False

    def write_status(self, status: str, **info) -> None:
        if self.main_process:
            history = compact_log_history(self.trainer.state.log_history)
            write_run_status(self.output_dir, status, **info, log_history=history)

    @property
    def output_dir(self) -> str:
        return self.trainer.args.output_dir

    def save_config(self) -> None:
        if self.main_process:
            save_resolved_config(self.output_dir, self.task_args, self.trainer.args, self.model_args)
        self.config_saved = True


@contextlib.contextmanager
def sigterm_as_exit() -> Iterator[None]:
    """SIGTERM (a scheduler's or `kill`'s stop) raises `SystemExit(143)` in the main thread, as Ctrl-C raises
    `KeyboardInterrupt`: the run's record then says `failed` instead of `running` forever, and the exit code stays
    a signal's (128 + 15). Elsewhere (not the main thread) the handler cannot be set and nothing changes. Also
    scripts/search.py's, so that it stops its running child on the way out."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stopped_by(err: BaseException) -> str:
    if isinstance(err, SystemExit):
        return f"stopped (exit {err.code}{', SIGTERM' if err.code == 128 + signal.SIGTERM else ''})"
    if isinstance(err, KeyboardInterrupt):
        return "stopped (KeyboardInterrupt)"
    return one_line(err)


@contextlib.contextmanager
def training_run(trainer, task_args, model_args) -> Iterator[TrainingRun]:
    """The lifecycle of one training run in ``trainer.args.output_dir``, the same whichever runner trains:

    on entry the run status `running` (with ``max_steps``); when the block (train, save) ends without an error, the
    resolved config (unless ``save_config()`` wrote it already) and the status `complete` (with the global step);
    when it raises, the status `failed` with the error in one line and the step reached, and the error goes on.
    Only the main process writes. The status is written last, so a run whose record is half-written is never
    `complete`. A step that leaves a trainable weight inf or NaN (a learning rate of 1e300) stops the run there, one
    line naming the step, the weight and the learning rate (`_FiniteWeights`), instead of a sampling traceback at the
    next step or a model of NaNs saved as complete. Every status carries the trainer's log history so far
    (`compact_log_history`), and the `running` record is rewritten with each checkpoint saved, so a run killed
    outright keeps its curve up to its last checkpoint.
    """
    run = TrainingRun(trainer, task_args, model_args, trainer.accelerator.is_main_process)
    callbacks = [_StatusAtCheckpoints(run), _FiniteWeights(trainer)]
    with sigterm_as_exit():  # set before `running` is written: no kill leaves the record saying `running`
        run.write_status("running", max_steps=trainer.args.max_steps)
        for callback in callbacks:
            trainer.add_callback(callback)
        try:
            yield run
            if not run.config_saved:
                run.save_config()
        except (Exception, KeyboardInterrupt, SystemExit) as err:  # a kill (SIGTERM) or Ctrl-C ends the run too
            # best effort: with a full disk even this can fail, and the status stays `running`
            with contextlib.suppress(OSError):
                run.write_status("failed", error=_stopped_by(err), step=trainer.state.global_step)
            raise
        finally:
            for callback in callbacks:
                trainer.remove_callback(callback)
    run.write_status("complete", global_step=trainer.state.global_step)


class _StatusAtCheckpoints(TrainerCallback):
    """Rewrites the `running` record with each checkpoint saved."""

    def __init__(self, run: TrainingRun):
        self.run = run

    def on_save(self, args, state, control, **kwargs):
        self.run.write_status("running", max_steps=args.max_steps, step=state.global_step)


class _FiniteWeights(TrainerCallback):
    """After each optimizer step, the trainable weights are finite on every process, else a `UserError` naming the
    step, the first weight that is not and the learning rate: a diverged run stops where it diverged (TRL's sampling
    would fail at the next step with a traceback naming no setting; the sampler would go on and save NaN weights)."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_step_end(self, args, state, control, model=None, **kwargs):
        import torch

        model = model if model is not None else self.trainer.model
        trainable = [(name, p) for name, p in model.named_parameters() if p.requires_grad and p.numel()]
        if not trainable:
            return
        finite = torch.stack([torch.isfinite(p.detach()).all() for _, p in trainable]).all()
        flag = (~finite).to(torch.float32).reshape(1)
        if self.trainer.accelerator.reduce(flag, reduction="sum").item() == 0:
            return
        name, bad = next(((n, p) for n, p in trainable if not torch.isfinite(p.detach()).all()), (None, None))
        where = "a weight of another process" if bad is None else f"{name} holds {_non_finite(bad)}"
        raise UserError(
            f"training diverged at step {state.global_step}: {where} after the optimizer step (learning_rate "
            f"{args.learning_rate:g}); lower learning_rate"
        )


def _non_finite(tensor) -> str:
    import torch

    values = tensor.detach()
    kinds = [kind for kind, hit in (("NaN", torch.isnan(values).any()), ("inf", torch.isinf(values).any())) if hit]
    return " and ".join(kinds)
