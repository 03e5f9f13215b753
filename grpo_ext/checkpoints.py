"""What grpo-ext keeps next to TRL's checkpoints, and how a checkpoint is saved whole or not at all.

- `CHECKPOINT_STATE_FILE` (`grpo_ext_state.json`): the KL controller, the refill draw counter, the number of
  completions scored so far.
- A checkpoint is written under a hidden staging name (`.checkpoint-N.partial/checkpoint-N`) and renamed into place
  once every file is written, so a save stopped by a full disk (or a kill) never leaves a `checkpoint-N` that
  `--resume_from_checkpoint` (or `get_last_checkpoint`) would pick: the previous checkpoint stays the last one.
- On resume the config decides the KL setup (`restore_kl_controller`): TRL decided from the config's β at start
  whether a reference model exists, so a β taken from the checkpoint could ask for log-probs no one computes.
- A save that fails any way (an `OSError`, or the `RuntimeError` torch's writer raises on a full disk) removes its
  partial folder; a failed write is one line naming the previous checkpoint to resume from.
- `check_resumable` checks a checkpoint folder whole before a resume loads anything (its state, weights and torch
  files), and the loads themselves name the file they could not read.
- A resumed run draws the prompts the uninterrupted one draws (`EpochSeededRepeatSampler`): TRL's `RepeatSampler`
  shuffles each epoch with the next permutation of one generator seeded once, which a resumed run (a fresh sampler)
  restarted at the first epoch's order; the sampler here draws epoch e's order from the seed and e alone (transformers
  tells it e through `set_epoch`, after a resume too), the same orders as TRL's in an uninterrupted run.
- `RUN_STATUS_FILE` (`grpo_ext_run.json`) in the output folder says whether the run finished: `running` while it
  trains, `complete` after the final save, `failed` (with the error) when it stopped. A run killed outright, or
  stopped by a full disk that could not even record the failure, stays `running`: never mistaken for complete.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
import time
import zipfile
from pathlib import Path

import torch
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints
from trl.trainer.utils import RepeatSampler

from grpo_ext.errors import UserError, user_file
from grpo_ext.io import atomic_write_json
from grpo_ext.kl_control import KL_CONTROLLERS, new_kl_controller
from grpo_ext.model_files import check_weights

__all__ = [
    "CHECKPOINT_STATE_FILE",
    "EpochSeededRepeatSampler",
    "StagedCheckpointsMixin",
    "RUN_STATUS_FILE",
    "check_resumable",
    "new_kl_controller",
    "promote_staged_checkpoint",
    "read_run_status",
    "restore_kl_controller",
    "staging_root",
    "write_run_status",
]

CHECKPOINT_STATE_FILE = "grpo_ext_state.json"
RUN_STATUS_FILE = "grpo_ext_run.json"
RUN_STATUSES = ("running", "complete", "failed")


# ---- the KL controller on resume ------------------------------------------------------------------------------


def restore_kl_controller(config, saved: dict) -> tuple:
    """The controller to resume with, and one note per way it differs from the checkpoint's (to be logged).

    The config wins, because TRL built (or did not build) the reference model from the config's β: the config's
    controller is built fresh and takes from the checkpoint's state what its ``resume`` rule allows
    (:mod:`grpo_ext.kl_control`: a fixed β stays the config's; an adaptive one keeps the checkpoint's adaptive β,
    clamped to the config's bounds). Either way β > 0 whenever the config's β is, so the reference log-probs TRL
    computes are there.
    """
    kind = saved.get("type")
    if kind not in KL_CONTROLLERS:
        raise UserError(
            f"{CHECKPOINT_STATE_FILE}: unknown KL controller type {kind!r} (expected {' or '.join(KL_CONTROLLERS)})"
        )
    controller = new_kl_controller(config)
    try:
        notes = controller.resume(saved)
    except ValueError as err:
        raise UserError(f"{CHECKPOINT_STATE_FILE}: {err}") from err
    return controller, notes


# ---- saving a checkpoint whole ----------------------------------------------------------------------------------


def staging_root(run_dir: str | os.PathLike, name: str) -> Path:
    """The hidden folder a checkpoint `name` is written under (its name matches neither `checkpoint-*` nor TRL's and
    transformers' checkpoint patterns, so nothing resumes from it)."""
    return Path(run_dir) / f".{name}.partial"


def promote_staged_checkpoint(run_dir: str | os.PathLike, name: str) -> Path:
    """Move the finished `staging_root(run_dir, name)/name` to `run_dir/name` (replacing an older folder of the same
    name, as transformers does) and remove the staging folder."""
    root = staging_root(run_dir, name)
    final = Path(run_dir) / name
    if final.exists():
        shutil.rmtree(final)
    os.replace(root / name, final)
    shutil.rmtree(root, ignore_errors=True)
    with contextlib.suppress(OSError):  # make the rename durable where the platform allows it
        fd = os.open(run_dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return final


def last_checkpoint(run_dir: str | os.PathLike) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(str(run_dir)) if os.path.isdir(run_dir) else None


# Messages of torch's zip writer (caffe2/serialize/inline_container.cc) when a write fails, e.g. on a full disk.
_TORCH_WRITE_FAILURES = ("PytorchStreamWriter", "inline_container", "unexpected pos", "file write failed")


def is_write_failure(err: BaseException) -> bool:
    """Whether `err` says a file could not be written: an `OSError`, torch.save's `RuntimeError` (it does not raise an
    `OSError` when the disk fills), or a safetensors serialisation error."""
    if isinstance(err, OSError) or type(err).__name__ == "SafetensorError":
        return True
    return isinstance(err, RuntimeError) and any(text in str(err) for text in _TORCH_WRITE_FAILURES)


# ---- the prompt order a resume draws ------------------------------------------------------------------------------


class EpochSeededRepeatSampler(RepeatSampler):
    """TRL's `RepeatSampler` whose epoch e is shuffled by the (e + 1)-th permutation of a generator seeded with `seed`,
    whatever happened before: the orders TRL's sampler gives an uninterrupted run (its generator, seeded once, moves
    on one permutation an epoch), also in a run resumed in a later epoch, which TRL's restarts at the first order.

    transformers (and accelerate's data loaders) call `set_epoch(e)` before each epoch's pass; without it (a sampler
    iterated by hand) each pass takes the next permutation, as TRL's does."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.epoch: int | None = None
        self._drawn = 0  # permutations drawn from the generator since it was seeded
        if self.shuffle:
            self._initial_seed = self.generator.initial_seed()

    @classmethod
    def like(cls, sampler: RepeatSampler) -> EpochSeededRepeatSampler:
        return cls(
            data_source=sampler.data_source,
            mini_repeat_count=sampler.mini_repeat_count,
            batch_size=sampler.batch_size,
            repeat_count=sampler.repeat_count,
            shuffle=sampler.shuffle,
            seed=sampler.seed,
        )

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self):
        if self.shuffle:
            epoch = self._drawn if self.epoch is None else self.epoch
            if epoch < self._drawn:  # rewind: seed again and draw up to this epoch's permutation
                self.generator.manual_seed(self._initial_seed)
                self._drawn = 0
            while self._drawn < epoch:
                torch.randperm(self.num_samples, generator=self.generator)
                self._drawn += 1
            self._drawn += 1  # the permutation RepeatSampler.__iter__ draws next
            self.epoch = None  # a pass without a set_epoch before it takes the next permutation
        return super().__iter__()


# ---- what a resume reads ----------------------------------------------------------------------------------------


def check_resumable(checkpoint: str | os.PathLike, max_steps: int | None = None) -> None:
    """`checkpoint` is a folder a run can resume from, checked before any model loads, else a `UserError` naming the
    folder or the file: not a folder, no `trainer_state.json` (an empty or foreign folder), a state that does not
    parse or is not a trainer's state, weights missing or torn, a torch file (`optimizer.pt`, `rng_state.pth`, ...)
    torn or not one at all; and with `max_steps` (> 0) a checkpoint already past it: the resumed run would train
    nothing and still be recorded `complete`, as if it had trained to `max_steps`."""
    what = "resume_from_checkpoint"
    folder = Path(checkpoint).expanduser()
    if not folder.is_dir():
        raise UserError(f"{what}: no such checkpoint folder: {checkpoint} (expected OUTPUT_DIR/checkpoint-N)")
    state = folder / "trainer_state.json"
    if not state.is_file():
        raise UserError(
            f"{what}: {folder} is not a checkpoint (no trainer_state.json); expected OUTPUT_DIR/checkpoint-N"
        )
    with user_file(state, what):
        recorded = json.loads(state.read_text())
    step = recorded.get("global_step") if isinstance(recorded, dict) else None
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise UserError(
            f"{what}: {state} is not a trainer's state (expected a JSON object with global_step, a step number >= 0)"
        )
    if max_steps is not None and max_steps > 0 and step > max_steps:
        raise UserError(
            f"{what}: {folder} is at step {step}, past max_steps {max_steps}: resuming would train nothing; pass "
            f"--max_steps above {step} to train further from it"
        )
    # Weights are checked where they are safetensors files; FSDP and DeepSpeed keep sharded states in subfolders.
    if any(folder.glob("*.safetensors")) or not any(p.is_dir() for p in folder.iterdir()):
        check_weights(folder, what)
    for path in sorted([*folder.glob("*.pt"), *folder.glob("*.pth")]):
        try:  # torch.save writes a zip archive whose directory ends the file: a torn or junk file has none
            with zipfile.ZipFile(path):
                pass
        except (zipfile.BadZipFile, OSError) as err:
            raise UserError(
                f"{what}: {path} is torn or not a torch file ({err}); resume from another checkpoint"
            ) from None


# ---- whether a run finished ---------------------------------------------------------------------------------------


def write_run_status(output_dir: str | os.PathLike, status: str, **info) -> None:
    """Record `status` (`running`, `complete`, `failed`) with `info` in `output_dir/RUN_STATUS_FILE`."""
    if status not in RUN_STATUSES:
        raise ValueError(f"run status must be one of {RUN_STATUSES}, got {status!r}")
    record = {"status": status, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **info}
    atomic_write_json(Path(output_dir) / RUN_STATUS_FILE, record)


def read_run_status(folder: str | os.PathLike) -> dict | None:
    """The run status recorded in `folder` (a training output folder), or None when there is none (an older run,
    a checkpoint folder, a model not trained here)."""
    path = Path(folder) / RUN_STATUS_FILE
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: cannot read the run status ({err})") from err
    if not isinstance(record, dict) or record.get("status") not in RUN_STATUSES:
        raise UserError(f"{path}: not a run status record (expected status: one of {', '.join(RUN_STATUSES)})")
    return record


# ---- the trainer side ---------------------------------------------------------------------------------------------


class StagedCheckpointsMixin:
    """`transformers.Trainer` methods (put before the trainer class): checkpoints saved whole, with the trainer's own
    state (`extension_state()` -> JSON, `restore_extension_state(state or None, checkpoint)`) in
    `CHECKPOINT_STATE_FILE`."""

    _checkpoint_staging: Path | None = None

    def _get_train_sampler(self, dataset=None):
        """TRL's train sampler, made to draw the same prompt order in a resumed run (`EpochSeededRepeatSampler`)."""
        sampler = super()._get_train_sampler(dataset)
        return EpochSeededRepeatSampler.like(sampler) if type(sampler) is RepeatSampler else sampler

    def _get_output_dir(self, trial):
        staging = self._checkpoint_staging
        return str(staging) if staging is not None else super()._get_output_dir(trial)

    def _save_checkpoint(self, model, trial):
        """Everything transformers and TRL save, plus `extension_state()`, under `staging_root`, then renamed into
        place whole: a save that fails (a full disk) leaves the previous checkpoint the last one, intact and
        resumable, and the partial folder is removed."""
        run_dir = self._get_output_dir(trial=trial)
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        staging = staging_root(run_dir, name)
        if self.args.should_save and staging.exists():
            shutil.rmtree(staging)  # left by a save that was killed
        self.accelerator.wait_for_everyone()
        self._checkpoint_staging = staging  # transformers and TRL write into staging/name (see `_get_output_dir`)
        try:
            super()._save_checkpoint(model, trial)
            if self.args.should_save:
                self._unstage_best_checkpoint(staging, run_dir, name)
                atomic_write_json(staging / name / CHECKPOINT_STATE_FILE, self.extension_state())
        except Exception as err:
            if self.args.should_save:  # whatever failed, a partial save must not stay (it may be filling the disk)
                shutil.rmtree(staging, ignore_errors=True)
            if not is_write_failure(err):
                raise
            previous = last_checkpoint(run_dir)
            resume = f"resume with --resume_from_checkpoint {previous}" if previous else "no earlier checkpoint exists"
            reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err).strip().splitlines()[0]
            raise UserError(
                f"saving {name} in {run_dir} failed ({reason}); the partial save was removed and the previous "
                f"checkpoint is intact: {resume}"
            ) from err
        finally:
            self._checkpoint_staging = None
        self.accelerator.wait_for_everyone()
        if self.args.should_save:
            promote_staged_checkpoint(run_dir, name)
            rotate_checkpoints(  # what transformers did inside the staging folder, where there was nothing to rotate
                output_dir=run_dir,
                save_total_limit=self.args.save_total_limit,
                best_model_checkpoint=self.state.best_model_checkpoint,
                use_mtime=True,
            )
        self.accelerator.wait_for_everyone()

    def _unstage_best_checkpoint(self, staging: Path, run_dir: str, name: str) -> None:
        """transformers recorded the best checkpoint (`load_best_model_at_end`) under the staging folder when it is this
        one: point it at where the checkpoint will be, in the state and in the saved trainer_state.json."""
        best = self.state.best_model_checkpoint
        if best and Path(best) == staging / name:
            from transformers.trainer import TRAINER_STATE_NAME

            self.state.best_model_checkpoint = os.path.join(run_dir, name)
            self.state.save_to_json(str(staging / name / TRAINER_STATE_NAME))

    def _load_rng_state(self, checkpoint):
        with _checkpoint_file_errors(checkpoint, "rng_state*.pth"):
            super()._load_rng_state(checkpoint)

    def _load_optimizer_and_scheduler(self, checkpoint):
        with _checkpoint_file_errors(checkpoint, "optimizer.pt / scheduler.pt"):
            super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        path = os.path.join(checkpoint, CHECKPOINT_STATE_FILE)
        state = None
        if os.path.exists(path):
            with user_file(path, "resume_from_checkpoint"), open(path) as f:
                state = json.load(f)
            if not isinstance(state, dict):
                raise UserError(f"resume_from_checkpoint: {path} is not a grpo-ext state file")
        self.restore_extension_state(state, checkpoint)


@contextlib.contextmanager
def _checkpoint_file_errors(checkpoint, files: str):
    """Inside, a torch file of `checkpoint` that does not load (torn, junk, or another model's optimizer state, which
    torch reports as a `ValueError` or `KeyError`) is a `UserError` naming the checkpoint and the files."""
    try:
        yield
    except UserError:
        raise
    except (RuntimeError, ValueError, KeyError, TypeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile) as err:
        message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(
            f"resume_from_checkpoint: cannot load {files} of {checkpoint} ({type(err).__name__}: {message}); resume "
            "from another checkpoint, or with the settings that wrote this one"
        ) from err
