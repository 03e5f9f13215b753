"""The experiment's state on disk, so a killed run resumes at its last finished iteration.

Layout of ``output_dir``: ``seed_<s>/start/`` holds a seed's iteration 0 (``start_state.json``: the base policy's
row, RM_0, its data), shared by the seed's arms; ``seed_<s>/<arm>/`` holds an arm's run (``iterative_state.json``:
the finished iteration, the policy / RM / reference folders, the replay-buffer files relative to the seed folder,
the report rows and the settings that made them), rewritten atomically at the end of each iteration. Each iteration
works in its own ``iter_<k>`` folder; one beyond the saved iteration is a half-done one, discarded and redone.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from grpo_ext.errors import UserError
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


def iteration_dir(run_dir: Path, iteration: int) -> Path:
    return run_dir / f"iter_{iteration}"


def load_state(run_dir: str | Path, name: str = LOOP_STATE_FILE) -> dict | None:
    """The state file ``name`` in ``run_dir`` (None when there is none)."""
    path = Path(run_dir) / name
    if not path.is_file():
        return None
    try:
        state = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: not valid JSON ({err}); delete it to start over") from None
    if state.get("version") != LOOP_STATE_VERSION:
        raise UserError(f"{path}: state version {state.get('version')!r}, expected {LOOP_STATE_VERSION}")
    return state


def save_state(run_dir: Path, state: dict, name: str = LOOP_STATE_FILE) -> None:
    atomic_write_json(run_dir / name, state)


def check_same_config(path: Path, saved: dict, config: dict) -> None:
    """A saved run continues only with the settings that made it: else a `UserError` naming the changed ones."""
    if saved != config:
        changed = sorted(k for k in set(saved) | set(config) if saved.get(k) != config.get(k))
        raise UserError(
            f"output_dir: {path} holds a run with other settings ({', '.join(changed)}); "
            "use another output_dir or --resume false"
        )


def resume_or_start(run_dir: Path, config: dict, initial: dict, resume: bool = True) -> dict:
    """The saved state when resuming a run made with the same ``config``, else ``initial`` (a fresh state: its
    ``iteration`` is the last one already done, its ``history`` their rows).

    A saved run with other settings is an error naming them. Iteration folders beyond the saved iteration are
    removed: they are what a killed iteration left behind.
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
            if folder.is_dir() and number.isdigit() and int(number) > state["iteration"]:
                shutil.rmtree(folder)
    return state


def write_records(path: Path, records: list[dict]) -> None:
    """RM records as JSON lines (a replay-buffer file), written atomically."""
    atomic_write_bytes(path, "".join(json.dumps(r) + "\n" for r in records).encode())


def read_records(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def replace_folder(src: Path, dst: Path) -> None:
    """Rename a finished folder into place (the previous content, if any, is dropped)."""
    if dst.exists():
        shutil.rmtree(dst)
    src.replace(dst)
