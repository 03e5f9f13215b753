"""The experiment's state on disk, so a killed run resumes at its last finished iteration.

Layout of ``output_dir``: ``seed_<s>/start/`` holds a seed's iteration 0 (``start_state.json``: the base policy's
row, RM_0, its data), shared by the seed's arms; ``seed_<s>/<arm>/`` holds an arm's run (``iterative_state.json``:
the finished iteration, the policy / RM / reference folders, the replay-buffer files, the report rows and the
settings that made them), rewritten atomically at the end of each iteration. Each iteration works in its own
``iter_<k>`` folder; one beyond the saved iteration is a half-done one, discarded and redone.

The state files name their folders relative to the seed folder (a moved or copied ``output_dir`` resumes from its own
folders); in memory they are paths. States written before kept absolute paths: read where they lie in the seed
folder, or at the same place under it once the folder moved, never outside it. A state file or replay record that
is not what this module writes is one `UserError` naming the file (and line), before any iteration trains; an
``iter_<k>`` that is a symbolic link is refused, never followed or deleted through.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
from pathlib import Path

from grpo_ext.errors import UserError, read_json_object
from grpo_ext.io import atomic_write_bytes, atomic_write_json

logger = logging.getLogger(__name__)

LOOP_STATE_FILE = "iterative_state.json"
LOOP_STATE_VERSION = 2  # 2: arms and seeds (iteration 0 shared by a seed's arms)

__all__ = [
    "LOOP_STATE_FILE",
    "LOOP_STATE_VERSION",
    "check_same_config",
    "iteration_dir",
    "load_state",
    "read_records",
    "replace_folder",
    "resume_or_start",
    "save_state",
    "write_records",
]


#: The fields of a state naming a folder (relative to the seed folder on disk), and what each state file must hold
#: (an arm's; a seed's iteration 0, iteration_zero.START_STATE_FILE).
_PATH_FIELDS = ("policy", "reference", "reward_model")
_REQUIRED = {
    LOOP_STATE_FILE: {"config": dict, "iteration": int, "history": list, "buffer": list, "policy": str},
    "start_state.json": {"config": dict, "iteration": int, "row": dict, "buffer": list, "reward_model": str},
}


def iteration_dir(run_dir: Path, iteration: int) -> Path:
    """``run_dir/iter_<iteration>``; a `UserError` when it is a symbolic link: an iteration writes, and a resume
    deletes, its folder, which through a link would be any folder of the machine."""
    folder = Path(run_dir) / f"iter_{iteration}"
    if folder.is_symlink():
        raise UserError(
            f"output_dir: {folder} is a symbolic link (to {folder.readlink()}); an iteration's folder is never "
            "followed (the loop writes and deletes it): remove the link"
        )
    return folder


def _on_disk(state: dict, seed_dir: Path) -> dict:
    """``state`` as its file keeps it: each folder field inside the seed folder relative to it (POSIX)."""
    out, seed_dir = dict(state), Path(seed_dir).resolve()
    for field in _PATH_FIELDS:
        value = out.get(field)
        if isinstance(value, str) and Path(value).is_absolute():
            # outside the seed folder (the base, before any iteration): as it is
            with contextlib.suppress(ValueError):
                out[field] = Path(value).resolve().relative_to(seed_dir).as_posix()
    return out


def _in_memory(state: dict, seed_dir: Path, path: Path) -> dict:
    """``state`` as read from ``path``: each folder field a path under the seed folder. An absolute one (a state
    written before paths were relative) is taken where it lies inside the seed folder, or where the same folders
    lie under it now (the output folder moved); one outside it is refused, naming the field."""
    out = dict(state)
    for field in _PATH_FIELDS:
        value = out.get(field)
        if value is None:
            continue
        where = Path(value) if isinstance(value, str) else None
        if where is not None and not where.is_absolute() and ".." not in where.parts:
            out[field] = str(seed_dir / where)
            continue
        if where is not None and where.is_absolute():
            if seed_dir.resolve() in where.resolve().parents:
                continue
            parts = where.parts
            if seed_dir.name in parts:  # the seed folder moved: the same folder under it now
                moved = seed_dir.joinpath(*parts[len(parts) - parts[::-1].index(seed_dir.name) :])
                if moved.exists():
                    out[field] = str(moved)
                    continue
        raise UserError(
            f"{path}: {field} {value!r} is not a folder of the seed folder {seed_dir}; a run resumes only from its "
            "own folders: run it in its own output_dir"
        )
    return out


def load_state(run_dir: str | Path, name: str = LOOP_STATE_FILE) -> dict | None:
    """The state file ``name`` in ``run_dir`` (None when there is none), its folders as paths (see the module doc); a
    file that is not a state of this loop (not JSON, not an object, a field missing) is a `UserError` naming it."""
    path = Path(run_dir) / name
    if not path.is_file():
        return None
    state = read_json_object(path, "output_dir", f"a state of the iterative loop ({name})")
    if state.get("version") != LOOP_STATE_VERSION:
        raise UserError(f"{path}: state version {state.get('version')!r}, expected {LOOP_STATE_VERSION}")
    for field, kind in _REQUIRED.get(name, {}).items():
        if not isinstance(state.get(field), kind) or isinstance(state.get(field), bool):
            raise UserError(
                f"{path}: not a state of the iterative loop ({field}: expected a {kind.__name__}, got "
                f"{state.get(field)!r}); move the output_dir away to start over"
            )
    return _in_memory(state, Path(run_dir).parent, path)


def save_state(run_dir: Path, state: dict, name: str = LOOP_STATE_FILE) -> None:
    atomic_write_json(run_dir / name, _on_disk(state, Path(run_dir).parent))


def check_same_config(path: Path, saved: dict, config: dict) -> None:
    """A saved run continues only with the settings that made it: else a `UserError` naming the changed ones. The base
    model as every clone names it (`model_record_name`: a state from another clone, whose base was recorded as that
    clone's folder, is the same run). The hint never says `--resume false`: that discards the finished iterations."""
    from grpo_ext.model_paths import model_record_name

    if isinstance(saved.get("base"), str):
        saved = {**saved, "base": model_record_name(saved["base"])}
    if saved != config:
        changed = sorted(k for k in set(saved) | set(config) if saved.get(k) != config.get(k))
        raise UserError(
            f"output_dir: {path} holds a run with other settings ({', '.join(changed)}); run it with the settings "
            "it was made with, or use another output_dir (nothing of the saved run was changed)"
        )


def resume_or_start(run_dir: Path, config: dict, initial: dict, resume: bool = True) -> dict:
    """The saved state when resuming a run made with the same ``config``, else ``initial`` (a fresh state: its
    ``iteration`` is the last one already done, its ``history`` their rows).

    A saved run with other settings is an error naming them. Iteration folders beyond the saved iteration are
    removed: they are what a killed iteration left behind. An ``iter_<k>`` that is a symbolic link is refused first.
    """
    state = load_state(run_dir) if resume else None
    if state is not None:
        check_same_config(run_dir, state["config"], config)
        logger.info("resuming %s after iteration %d", run_dir, state["iteration"])
        print(f"[iterative] resuming {run_dir} after iteration {state['iteration']}", flush=True)
    else:
        state = {"version": LOOP_STATE_VERSION, "config": config, **initial}
    if run_dir.is_dir():
        for folder in run_dir.glob("iter_*"):
            number = folder.name.removeprefix("iter_")
            if number.isdigit():
                folder = iteration_dir(run_dir, int(number))  # a link: refused by name, never deleted through
            if folder.is_dir() and number.isdigit() and int(number) > state["iteration"]:
                shutil.rmtree(folder)
    return state


def write_records(path: Path, records: list[dict]) -> None:
    """RM records as JSON lines (a replay-buffer file), written atomically."""
    atomic_write_bytes(path, "".join(json.dumps(r) + "\n" for r in records).encode())


def read_records(path: Path) -> list[dict]:
    """The RM records of a replay-buffer file; a `UserError` naming the file (and the line) when it cannot be read or a
    line is not a record (a JSON object with an ``id``): the replay would fail on it after the iteration trained."""
    records = []
    try:
        with path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError as err:
                    raise UserError(f"{path} line {number}: not a JSON record ({err})") from None
                if not isinstance(record, dict) or "id" not in record:
                    raise UserError(f"{path} line {number}: not a reward-model record (a JSON object with an id)")
                records.append(record)
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: cannot read the replay buffer's records ({err})") from None
    return records


def replace_folder(src: Path, dst: Path) -> None:
    """Rename a finished folder into place (the previous content, if any, is dropped)."""
    if dst.exists():
        shutil.rmtree(dst)
    src.replace(dst)
