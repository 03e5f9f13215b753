"""One training run per output folder: a lock held while a run writes there, and a folder holding another run's
results refused unless the user says what to do with them.

- `OutputFolderLock`: an exclusive `fcntl.flock` on `LOCK_FILE` in the output folder, held for the whole run. The
  kernel drops the lock when the holding process ends, however it ends (a SIGKILL too): a lock file left by a dead
  run is stale by construction and is taken over; a live holder is named (pid, host, start time) in the refusal.
- `prepare_output_dir`: a folder with results of an earlier run (checkpoints, a model, a finished run's record) is
  refused, so two runs never mix their checkpoints and a shorter re-run never passes for the finished one. Continue
  that run with `resume_from_checkpoint` (one of its own checkpoints), or replace it with `overwrite_output_dir`,
  which clears only a folder a grpo-ext run wrote (`RUN_STATUS_FILE`); a folder of other files is never cleared.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import time
from pathlib import Path

from grpo_ext.checkpoints import RUN_STATUS_FILE, last_checkpoint, read_run_status
from grpo_ext.errors import UserError

__all__ = ["LOCK_FILE", "OutputFolderLock", "check_loads_outside", "prepare_output_dir"]

LOCK_FILE = ".grpo_ext.lock"


class OutputFolderLock:
    """`with OutputFolderLock(folder):` the one run writing into `folder` (created if needed), else a `UserError`
    naming the run that holds it (and `field_name`, the flag that named the folder)."""

    def __init__(self, folder: str | os.PathLike, field_name: str = "output_dir"):
        self.folder = Path(folder)
        self.field_name = field_name
        self.path = self.folder / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> OutputFolderLock:
        self.folder.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise UserError(
                    f"{self.field_name}: {self.folder} is in use by another run ({self._holder()}); wait for it to "
                    f"end or choose another {self.field_name}"
                ) from None
            # A holder that was just releasing unlinks the file it locked: make sure ours is the one at the path.
            with contextlib.suppress(FileNotFoundError):
                if os.fstat(fd).st_ino == os.stat(self.path).st_ino:
                    break
            os.close(fd)
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        os.ftruncate(fd, 0)
        os.write(fd, (json.dumps(holder) + "\n").encode())
        self._fd = fd
        return self

    def _holder(self) -> str:
        try:
            holder = json.loads(self.path.read_text())
            return f"process {holder['pid']} on {holder['host']} since {holder['since']}"
        except (OSError, ValueError, KeyError, TypeError):
            return "a process that has not said which yet"

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):  # unlinked while held: nobody can lock the old file after us
            os.unlink(self.path)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> OutputFolderLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _is_inside(path: Path, folder: Path) -> bool:
    return folder.resolve() in path.resolve().parents


def check_loads_outside(folder: str | os.PathLike, loads: dict[str, str | None]) -> None:
    """Refuse a run whose inputs (`field -> path`: the model, its adapter's base, the PRM) lie in the output folder it
    writes into: `overwrite_output_dir` would delete them before they are loaded, and the final save would replace
    the model the run started from. Names that are not local folders (hub ids, `embedded`) are never inside."""
    folder = Path(folder).expanduser().resolve()
    for field_name, path in loads.items():
        if not isinstance(path, str) or not path or not Path(path).expanduser().exists():
            continue
        where = Path(path).expanduser().resolve()
        if where == folder or folder in where.parents:
            raise UserError(
                f"{field_name}: {path} lies inside output_dir {folder}, which the run writes into (and "
                "--overwrite_output_dir clears): train into another output_dir"
            )


def _results(folder: Path) -> list[str]:
    """What an earlier run left in `folder` beyond the lock, its status record and unfinished (hidden) saves."""
    if not folder.is_dir():
        return []
    ignored = {LOCK_FILE, RUN_STATUS_FILE}
    return sorted(
        p.name
        for p in folder.iterdir()
        if p.name not in ignored and not (p.name.startswith(".checkpoint-") and p.name.endswith(".partial"))
    )


def prepare_output_dir(folder: str | os.PathLike, *, resume: str | None, overwrite: bool) -> None:
    """Check `folder` (held with `OutputFolderLock`) before a run writes into it; with `overwrite`, clear it.

    Accepted: a missing or empty folder, one where an earlier run stopped before it saved anything, and with `resume`
    a checkpoint of this folder. Refused, naming what to do: another run's results without a flag, `resume` from a
    checkpoint of another folder into one with results (two runs would mix), `overwrite` of a folder that no
    grpo-ext run wrote, and both flags at once."""
    folder = Path(folder)
    if resume and overwrite:
        raise UserError(
            "overwrite_output_dir: cannot be combined with resume_from_checkpoint (one deletes the run that the other "
            "continues)"
        )
    results = _results(folder)
    if not results:
        return
    status = read_run_status(folder)
    if resume:
        if _is_inside(Path(resume), folder):
            return
        raise UserError(
            f"resume_from_checkpoint: {resume} is not a checkpoint of output_dir {folder}, which holds another run's "
            "files: the two runs would mix; resume into the checkpoint's own folder or into an empty one"
        )
    if overwrite:
        if status is None:
            raise UserError(
                f"overwrite_output_dir: {folder} holds no grpo-ext run (no {RUN_STATUS_FILE}); it clears only a "
                "folder that scripts/train.py wrote: remove the folder yourself or choose another output_dir"
            )
        for path in folder.iterdir():
            if path.name != LOCK_FILE:  # ours, held
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        return
    shown = ", ".join(results[:4]) + (", ..." if len(results) > 4 else "")
    if status is None:
        raise UserError(
            f"output_dir: {folder} is not empty ({shown}) and holds no grpo-ext run; choose an empty or new folder"
        )
    what = {"complete": "a finished run", "failed": "a run that failed", "running": "a run that was stopped"}
    step = status.get("global_step", status.get("step"))
    recorded = f"{RUN_STATUS_FILE}: {status['status']}" + (f" at step {step}" if step is not None else "")
    previous = last_checkpoint(folder)
    resume_hint = f"--resume_from_checkpoint {previous} to continue it, " if previous else ""
    raise UserError(
        f"output_dir: {folder} holds {what[status['status']]} ({recorded}; {shown}); pass {resume_hint}"
        "--overwrite_output_dir true to delete it and start again, or choose another output_dir"
    )
