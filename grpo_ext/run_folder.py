"""One training run per output folder: a lock held while a run writes there, and a folder holding another run's
results refused unless the user says what to do with them.

- `OutputFolderLock`: an exclusive `fcntl.flock` on `LOCK_FILE` in the output folder, held for the whole run. The
  kernel drops the lock when the holding process ends, however it ends (a SIGKILL too): a lock file left by a dead
  run is stale by construction and is taken over; a live holder is named (pid, host, start time) in the refusal.
- `prepare_output_dir`: a folder with results of an earlier run (checkpoints, a model, a finished run's record) is
  refused, so two runs never mix their checkpoints and a shorter re-run never passes for the finished one. Continue
  that run with `resume_from_checkpoint` (one of its own checkpoints), or replace it with `overwrite_output_dir`,
  which clears only a folder a grpo-ext run wrote (`RUN_STATUS_FILE`); a folder of other files is never cleared.
- `OutputFolder`: the same rules for every other writer (the harness, scripts/search.py, the study, the iterative
  report, publish's dry run): it writes only into a folder it made or that carries its own record (`FOLDER_RECORD`,
  naming the writer), refuses a folder holding files it did not write, holds the lock while it writes, and hands out
  paths only through `inside`, which never follows a symbolic link out of the folder.
- `path_part`: a name from a config or a flag (an arm name, a grid setting) as one folder name, never a path.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path

from grpo_ext.checkpoints import RUN_STATUS_FILE, last_checkpoint, read_run_status
from grpo_ext.errors import UserError

__all__ = [
    "FOLDER_RECORD",
    "LOCK_FILE",
    "OutputFolder",
    "OutputFolderLock",
    "check_loads_outside",
    "check_only_ours",
    "inside",
    "path_part",
    "prepare_output_dir",
]

LOCK_FILE = ".grpo_ext.lock"
#: Written into every folder an `OutputFolder` made or took over: which writer's it is (`{"writer": ...}`), and for a
#: writer that may later replace the whole folder (publish's --overwrite), the files it wrote (`"files"`).
FOLDER_RECORD = ".grpo_ext_folder.json"


class OutputFolderLock:
    """`with OutputFolderLock(folder):` the one run writing into `folder` (created if needed), else a `UserError`
    naming the run that holds it (and `field_name`, the flag that named the folder). The lock file is never opened
    through a symbolic link (a `UserError` naming it): it is truncated and written, and so would be its target."""

    def __init__(self, folder: str | os.PathLike, field_name: str = "output_dir"):
        self.folder = Path(folder)
        self.field_name = field_name
        self.path = self.folder / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> OutputFolderLock:
        self.folder.mkdir(parents=True, exist_ok=True)
        while True:
            fd = self._open()
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

    def _open(self) -> int:
        """The lock file, opened (created if missing) without following a symbolic link: the lock is truncated and
        written, and through a link that would be any file of the machine."""
        if self.path.is_symlink():
            raise UserError(
                f"{self.field_name}: {self.path} is a symbolic link (to {os.readlink(self.path)}); a lock is never "
                "opened through one (it would overwrite what the link points at): remove the link"
            )
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except OSError as err:  # a link put there since (ELOOP), a folder of that name, no permission
            raise UserError(
                f"{self.field_name}: {self.path} cannot be opened as the folder's lock ({err.strerror or err}); "
                "remove it or choose another folder"
            ) from None

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


# ---- every other writer's output folder -------------------------------------------------------------------------


def path_part(value, field_name: str) -> str:
    """`value` (a name from a config or a flag: an arm name, a grid setting) as one folder name under an output folder;
    a `UserError` naming `field_name` when it would be a path instead: a separator (`/`, `\\`), a NUL byte, `.` or `..`,
    empty, not a string, or over 200 bytes (file systems stop at 255)."""
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"{field_name}: expected a name (it becomes a folder name), got {value!r}")
    if any(c in value for c in "/\\\0") or value in (".", ".."):
        raise UserError(
            f"{field_name}: {value!r} cannot be a folder name: a name becomes one folder under the output folder, so "
            "it may not contain '/', '\\' or a NUL byte, nor be '.' or '..'"
        )
    if len(value.encode()) > 200:
        raise UserError(f"{field_name}: {value[:60]!r}... makes a folder name over 200 bytes; choose a shorter name")
    return value


def inside(root: str | os.PathLike, *parts: str, field_name: str) -> Path:
    """`root / parts` once it is known to stay inside `root`: every part one folder name (`path_part`), and the path
    with every symbolic link resolved still inside the resolved `root`. A link in the folder that leads out of it is
    refused, never followed: a writer would delete, truncate or append to whatever it points at."""
    root = Path(root)
    path = root.joinpath(*(path_part(part, field_name) for part in parts))
    real_root, real = root.resolve(), path.resolve()
    if real != real_root and real_root not in real.parents:
        raise UserError(
            f"{field_name}: {path} leads to {real}, outside {root} (a symbolic link); not followed: remove the link "
            f"or choose another {field_name}"
        )
    return path


def _atomic_leftover(name: str) -> bool:
    """A temporary file of `grpo_ext.io.atomic_write_bytes` (`.<name>.<random>.tmp`) a crash left behind."""
    return name.startswith(".") and name.endswith(".tmp")


class OutputFolder:
    """`with OutputFolder(folder, writer="evals/passk_majk.py", field_name="--out") as out:` the one owner of an output
    folder for the writer named: while the block runs, `out.path(name, ...)` is where it writes.

    Accepted: a new or empty folder, one carrying this writer's record (`FOLDER_RECORD`), and one from before the
    record that `adopt(folder)` recognises as this writer's (the record is then written). Refused, naming the folder
    and what it holds: a folder holding files the writer did not write (a user's report.md, a sample cache that is
    not one), another writer's folder, a file where a folder should be. Files a recorded folder gained since (a
    user's notes) are left alone: the writer writes only its own names. The lock (`OutputFolderLock`) is held for the
    whole block, so two runs never write one folder at once."""

    def __init__(
        self,
        folder: str | os.PathLike,
        *,
        writer: str,
        field_name: str,
        adopt: Callable[[Path], bool] | None = None,
    ):
        self.folder = Path(folder)
        self.writer = writer
        self.field_name = field_name
        self.adopt = adopt
        self._lock = OutputFolderLock(self.folder, field_name=field_name)

    def _entries(self) -> list[str]:
        ignored = {LOCK_FILE, FOLDER_RECORD}
        return sorted(p.name for p in self.folder.iterdir() if p.name not in ignored and not _atomic_leftover(p.name))

    def record(self) -> dict | None:
        """The folder's record (None when it has none); one that is not this module's JSON object is refused."""
        path = self.folder / FOLDER_RECORD
        if not path.exists() and not path.is_symlink():
            return None
        inside(self.folder, FOLDER_RECORD, field_name=self.field_name)
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            record = None
        if not isinstance(record, dict) or not isinstance(record.get("writer"), str):
            raise UserError(
                f"{self.field_name}: {path} is not a record this project wrote (expected a JSON object naming its "
                f"writer); the folder is not written into: remove it or choose another {self.field_name}"
            )
        return record

    def check(self) -> None:
        """What `__enter__` refuses, without taking the folder (a run that writes its report hours later checks
        first)."""
        folder = self.folder
        if not folder.exists():
            if folder.is_symlink():
                raise UserError(f"{self.field_name}: {folder} is a symbolic link to nothing; not followed")
            return
        if not folder.is_dir():
            raise UserError(f"{self.field_name}: {folder} is not a folder")
        record = self.record()
        if record is not None and record["writer"] != self.writer:
            raise UserError(
                f"{self.field_name}: {folder} holds the output of {record['writer']} ({FOLDER_RECORD}), not of "
                f"{self.writer}; choose another {self.field_name}"
            )
        entries = self._entries()
        if record is None and entries and not (self.adopt is not None and self.adopt(folder)):
            shown = ", ".join(entries[:4]) + (", ..." if len(entries) > 4 else "")
            raise UserError(
                f"{self.field_name}: {folder} is not empty ({shown}) and holds no output of {self.writer}: files "
                f"it did not write are never overwritten; choose an empty or new {self.field_name}"
            )

    def __enter__(self) -> OutputFolder:
        self.check()  # first: a refused folder is not even created or locked
        self._lock.acquire()
        try:
            self.check()  # again, now that no other run can write there
            if self.record() is None:
                from grpo_ext.io import atomic_write_json

                atomic_write_json(self.folder / FOLDER_RECORD, {"writer": self.writer})
        except BaseException:
            self._lock.release()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._lock.release()

    def path(self, *parts: str) -> Path:
        """Where the writer writes `parts` (each one folder name) in this folder: `inside` it, links not followed."""
        return inside(self.folder, *parts, field_name=self.field_name)


def check_only_ours(
    folder: str | os.PathLike, *, writer: str, field_name: str, legacy_record: str | None = None
) -> None:
    """Before a writer replaces `folder` whole (publish's --overwrite): it carries `writer`'s record listing the files
    that writer put there (`"files"`; `legacy_record`: the name of an older record holding that list), and holds
    nothing else. A user's folder named by mistake, or a file added since, is never deleted."""
    folder = Path(folder)
    if folder.is_symlink() or not folder.is_dir():
        raise UserError(f"{field_name}: {folder} is not a folder {writer} wrote; not replaced")
    files = None
    for name in (FOLDER_RECORD, legacy_record):
        if name is None:
            continue
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            record = json.loads((folder / name).read_text())
            if name == FOLDER_RECORD and record.get("writer") != writer:
                continue
            files = {str(f) for f in record["files"]}
            break
    if files is None:
        raise UserError(
            f"{field_name}: {folder} was not written by {writer} (no readable {FOLDER_RECORD} listing its files); it "
            f"is replaced only when {writer} wrote it: remove the folder yourself or choose another {field_name}"
        )
    others = sorted(
        p.name for p in folder.iterdir() if p.name not in files and p.name not in {FOLDER_RECORD, legacy_record}
    )
    if others:
        shown = ", ".join(others[:5]) + (", ..." if len(others) > 5 else "")
        raise UserError(
            f"{field_name}: {folder} holds files {writer} did not write ({shown}); not replaced: remove them or "
            f"choose another {field_name}"
        )
