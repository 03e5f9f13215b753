"""A study run cut by a stop resumes from its newest checkpoint instead of training again from step 0.

Every run of a study saves a checkpoint every ``checkpoint_steps`` optimizer steps (the study file's; 0: none),
keeping only the newest, through TRL / transformers' own saves (``--save_strategy steps --save_steps K
--save_total_limit 1``): LoRA adapters, optimizer, scheduler, RNG states, the trainer's and the runner's state
(:mod:`grpo_ext.methods.sittings`). When the study comes back to a run folder that holds no finished run, the newest
checkpoint resumes it (``--resume_from_checkpoint``), provided the folder's training record (``study_run.json``)
is this study's command for the run (:func:`~grpo_ext.experiments.study.provenance.check_training`): a checkpoint
of another command is never resumed. A checkpoint that is not whole (a save killed half-way, a file missing or
torn) is skipped with a printed line, for the one before it or step 0; so is a run's last checkpoint, saved once it
had stopped training (killed in the second before its records were written): transformers trains at least one step
after a resume, which would take the run past its end. The checkpoint flags are no part of the run's record: a run
trained whole and one resumed are the same command, and they train the same model.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from grpo_ext.errors import UserError

__all__ = ["checkpoint_flags", "clear_checkpoints", "resume_point"]

_CHECKPOINT = re.compile(r"checkpoint-(\d+)")
#: What every whole checkpoint of a method run holds besides its weights (`grpo_ext_state.json` too for an online
#: method: GRPOExtTrainer writes it before the checkpoint is renamed into place).
_FILES = ("trainer_state.json", "optimizer.pt", "scheduler.pt", "rng_state.pth")


def checkpoint_flags(every: int) -> list[str]:
    """The runner's flags that save a checkpoint every ``every`` steps, the newest only (none for 0)."""
    if every <= 0:
        return []
    return ["--save_strategy", "steps", "--save_steps", str(every), "--save_total_limit", "1"]


def _checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every ``checkpoint-N`` folder, newest first."""
    found = []
    for path in Path(folder).glob("checkpoint-*"):
        match = _CHECKPOINT.fullmatch(path.name)
        if match and path.is_dir():
            found.append((int(match.group(1)), path))
    return sorted(found, reverse=True)


def _unusable(step: int, path: Path, online: bool) -> str | None:
    """Why ``path`` cannot be resumed from, or None when it is whole."""
    from grpo_ext.checkpoints import CHECKPOINT_STATE_FILE, check_resumable
    from grpo_ext.methods.sittings import PROGRESS_KEY

    required = (*_FILES, CHECKPOINT_STATE_FILE) if online else _FILES
    missing = [name for name in required if not (path / name).is_file()]
    if missing:
        return f"no {', '.join(missing)} (a save cut half-way?)"
    try:
        check_resumable(path)
    except UserError as err:
        return str(err).removeprefix("resume_from_checkpoint: ")
    state = json.loads((path / "trainer_state.json").read_text())  # parsed by check_resumable
    if state.get("global_step") != step:
        return f"its trainer_state.json is at step {state.get('global_step')}, not {step}"
    saved = state.get("stateful_callbacks") or {}
    if PROGRESS_KEY not in saved:
        return f"its trainer_state.json keeps no {PROGRESS_KEY} (not a method runner's checkpoint)"
    if ((saved.get("TrainerControl") or {}).get("args") or {}).get("should_training_stop"):
        # transformers trains at least one step after a resume: the run would go past its end (max_steps, its budget)
        return "the run had stopped training there (stopped before its records were written); it trains again"
    return None


def resume_point(folder: Path, record: dict, online: bool) -> Path | None:
    """The newest whole checkpoint in ``folder`` when the folder's training record is ``record`` (this study's command
    for the run), else None; each checkpoint passed over is named in a printed line. Call it before the record is
    written anew."""
    from grpo_ext.experiments.study.provenance import RUN_RECORD, check_training

    checkpoints = _checkpoints(folder)
    if not checkpoints:
        return None
    if not (Path(folder) / RUN_RECORD).is_file():
        print(f"not resuming {folder}: no {RUN_RECORD} says which command saved its checkpoints", flush=True)
        return None
    try:
        check_training(folder, record)
    except UserError:
        print(f"not resuming {folder}: its checkpoints were saved by another command (its {RUN_RECORD})", flush=True)
        return None
    for step, path in checkpoints:
        why = _unusable(step, path, online)
        if why is None:
            return path
        print(f"ignoring {path}: {why}", flush=True)
    return None


def clear_checkpoints(folder: Path, keep: Path | None = None) -> None:
    """Remove every checkpoint of ``folder`` but ``keep`` (whole or not, and the staging folders of saves cut
    half-way): before a run starts again from step 0 (no later sitting may take another command's checkpoint for its
    own), before it resumes from ``keep`` (the ones passed over are never looked at again), and once it has finished
    (its model and records are saved)."""
    for _, path in _checkpoints(folder):
        if keep is None or path != Path(keep):
            shutil.rmtree(path, ignore_errors=True)
    for path in Path(folder).glob(".checkpoint-*.partial"):
        shutil.rmtree(path, ignore_errors=True)
