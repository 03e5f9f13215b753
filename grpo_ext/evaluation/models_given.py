"""The models a harness command line was given, checked before the first one is loaded:

- each resolves (a missing folder is named);
- no model is given twice, however it is spelled: ``./x``, ``x/``, an absolute path, a symlink to it, ``embedded`` and
  the embedded folder are one model, and comparing a model with itself would report a difference of zero as a result;
  nor twice under two folders: a byte-identical copy (the same model fingerprint: config, tokenizer, every byte of the
  weights, an adapter's base) draws the same samples;
- a folder whose training run did not finish (``grpo_ext_run.json``: ``running``, or ``failed``: killed, a full disk,
  no reward scored) is refused, naming the folder and the status, unless ``--allow-unfinished``; then a warning says
  so on the terminal and in the report.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from grpo_ext.errors import UserError

__all__ = ["check_models", "model_identity", "unfinished_run"]


def model_identity(name_or_path: str) -> str:
    """What a ``--model`` value names: the resolved real path of a local folder (symlinks followed), else the hub
    id as given."""
    from grpo_ext.model_paths import resolve_model_path

    resolved = resolve_model_path(name_or_path)
    path = Path(resolved).expanduser()
    return str(path.resolve()) if path.exists() else resolved


def unfinished_run(name: str, identity: str) -> str | None:
    """A one-line description of the unfinished training run in the folder ``identity`` (``name``: how the user gave
    it, e.g. ``--model x``), or None (finished, or no record)."""
    from grpo_ext.checkpoints import RUN_STATUS_FILE, read_run_status

    folder = Path(identity)
    if not folder.is_dir():
        return None
    record = read_run_status(folder)
    if record is None or record["status"] == "complete":
        return None
    step = f" at step {record['global_step']}" if record.get("global_step") is not None else ""
    why = f": {str(record['error']).strip().splitlines()[0]}" if record.get("error") else ""
    status = f"{RUN_STATUS_FILE}: {record['status']}{step}{why}"
    return f"{name}: the training run in {folder} did not finish ({status})"


def check_models(models: Sequence[str], *, allow_unfinished: bool = False) -> dict[str, str]:
    """Checks ``models`` (the ``--model`` values) as the module docstring says; returns ``{model: warning}`` for the
    unfinished runs ``allow_unfinished`` lets through."""
    seen: dict[str, str] = {}
    copies: dict[str, str] = {}  # model fingerprint -> the --model first given with it
    warnings: dict[str, str] = {}
    for name in models:
        if not name.strip():
            raise UserError("--model: empty; give a model folder, a name (embedded, smollm2-135m-instruct) or a hub id")
        identity = model_identity(name)
        if identity in seen:
            same = "given twice" if seen[identity] == name else f"and --model {seen[identity]} are the same model"
            raise UserError(
                f"--model {name} {same} ({identity}): a model would be compared with itself; give each model once"
            )
        seen[identity] = name
        fingerprint = _fingerprint(identity)
        if fingerprint is not None and fingerprint in copies:
            raise UserError(
                f"--model {name} holds the same files as --model {copies[fingerprint]} (model fingerprint "
                f"{fingerprint}: config, tokenizer and every byte of the weights): a copy would be compared with "
                "itself; give each model once"
            )
        if fingerprint is not None:
            copies[fingerprint] = name
        message = unfinished_run(f"--model {name}", identity)
        if message is None:
            continue
        if not allow_unfinished:
            raise UserError(
                f"{message}; score one of its checkpoint-N folders, finish the run, or pass --allow-unfinished"
            )
        warnings[name] = f"{message}: scored anyway (--allow-unfinished)"
        print(f"warning: {warnings[name]}", file=sys.stderr, flush=True)
    return warnings


def _fingerprint(identity: str) -> str | None:
    """The model fingerprint of a local folder (what the harness records; hashed once a process), else None."""
    from grpo_ext.evaluation.cache import model_fingerprint

    return model_fingerprint(identity) if Path(identity).is_dir() else None
