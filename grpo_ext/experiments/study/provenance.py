"""What made each finished run and evaluation of a study, so that a resumed study reuses only its own.

A study resumes into its `--out`: a run folder with weights and a training cost, an evaluation file, is taken as
done. That was true whatever made it: a `--quick` rehearsal's tiny runs resumed as the full study's, another
`--model`'s base scores, an evaluation at another `n`, `limit` or temperature, a method config edited since. Now
each run folder keeps the command that trained it (`study_run.json`: the runner's flags without the output folder or
the progress bar, the base model resolved, the sha256 of the method config) and each evaluation file the settings
it was drawn with (`study_evaluation.settings`). A finished one made otherwise is refused with one line naming the
folder and the first difference, never reused; a folder from before these records is taken as it is.

A record names models as :func:`grpo_ext.model_paths.model_record_name` gives them (`embedded`, a real model's name,
a folder of the repository relative to it), never a folder of one clone or machine; records written with the
resolved folder read as that name, so a study resumes from another clone. A run is finished only when its run record
says `complete` (:func:`finished_run`), and an evaluation file is reused only in the folder of the run it scored.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from grpo_ext.errors import UserError, read_json_object
from grpo_ext.model_paths import model_record_name

__all__ = [
    "RUN_RECORD",
    "check_evaluation",
    "check_training",
    "comparable",
    "evaluation_settings",
    "finished_run",
    "record_training",
    "training_record",
]

RUN_RECORD = "study_run.json"
#: Flags of a run's command that do not change what it trains (the folder: --out may be spelled another way).
_NEUTRAL = {"--output_dir": 1, "--disable_tqdm": 1}


#: The flag that names the study's output folder: what its records' errors name (with the file).
_FLAG = "--out"


def _model_identity(name: str) -> str:
    """The model ``name`` resolves to, as a record names it on any clone or machine (not the folder it resolves to
    here: the embedded base's folder is the clone's, a real model's the user's cache)."""
    from grpo_ext.evaluation.models_given import model_identity

    try:
        resolved = model_identity(name)
    except FileNotFoundError:
        resolved = name
    return model_record_name(resolved)


def finished_run(folder: Path) -> bool:
    """Whether ``folder`` holds a finished run: weights, its cost record, and its run record saying `complete`. A run
    recorded `failed` or `running` (killed or failed after it saved weights and cost, e.g. while writing its other
    records) is not finished: it trains again, never scored as trained. The method runners' untrained run (no training
    data: the base saved as its model) wrote no run record before it recorded `complete`: its cost record says
    `no_training_data`. A cost record that is not a JSON object is named (it was a traceback in the report)."""
    from grpo_ext.checkpoints import read_run_status
    from grpo_ext.methods.cost import COST_FILE

    folder = Path(folder)
    if not (folder / COST_FILE).is_file():
        return False
    cost = read_json_object(folder / COST_FILE, _FLAG, "a run's training cost record")
    if not any(folder.glob("*.safetensors")):
        return False
    status = read_run_status(folder)
    if status is None:
        return "no_training_data" in (cost.get("details") or {})
    return status["status"] == "complete"


def training_record(argv: list[str], config_path: str | Path, base_identity: str | None = None) -> dict:
    """The command of a study run as recorded: its flags less the neutral ones, the base model resolved (or named by
    `base_identity`: a study's start, by its hash), the method config named by its file name (the clone it sits in
    is no part of the command), and the config's sha256."""
    flags, i = [], 0
    while i < len(argv):
        if argv[i] in _NEUTRAL:
            i += 1 + _NEUTRAL[argv[i]]
            continue
        value = argv[i]
        if i > 0 and argv[i - 1] == "--model_name_or_path":
            value = base_identity or _model_identity(value)
        flags.append(value)
        i += 1
    config = Path(config_path)
    digest = hashlib.sha256(config.read_bytes()).hexdigest() if config.is_file() else None
    return comparable({"argv": flags, "config_sha256": digest})


def comparable(record: dict) -> dict:
    """``record`` (a run's command) as two clones compare it: its ``--config`` path cut to the file name (what the
    config says is its sha256) and its model named by :func:`model_record_name`, so the same study resumed from another
    clone (or a worktree, or by another user) is the same command. Records written before this kept the path and the
    resolved model folder."""
    argv = list(record["argv"]) if isinstance(record.get("argv"), list) else []
    for i in range(len(argv) - 1):
        if argv[i] == "--config":
            argv[i + 1] = Path(argv[i + 1]).name
        elif argv[i] == "--model_name_or_path" and isinstance(argv[i + 1], str):
            argv[i + 1] = model_record_name(argv[i + 1])
    return {**record, "argv": argv}


def _first_difference(old: dict, new: dict) -> str:
    if old.get("config_sha256") != new.get("config_sha256"):
        return "its method config was edited since"
    old_argv, new_argv = old.get("argv") or [], new.get("argv") or []
    for a, b in zip(old_argv, new_argv, strict=False):
        if a != b:
            return f"{a!r} where this study has {b!r}"
    return f"flags {old_argv[len(new_argv) :] or new_argv[len(old_argv) :]} differ"


def check_training(folder: Path, record: dict) -> None:
    """A finished run in ``folder`` was trained by ``record``'s command (or before records were kept), else a
    `UserError`: a study never takes another command's run for its own."""
    path = Path(folder) / RUN_RECORD
    if not path.is_file():
        return
    old = comparable(read_json_object(path, _FLAG, "the record of a study's run (study_run.json)"))
    if old != record:
        raise UserError(
            f"{folder}: a finished run of another command ({_first_difference(old, record)}; e.g. a --quick "
            "rehearsal or another --model): a study never reuses it; use another --out, or remove that folder"
        )


def record_training(folder: Path, record: dict) -> None:
    """Write ``record`` into ``folder`` before the run starts (a killed run is then known to be of this command)."""
    from grpo_ext.io import atomic_write_json

    Path(folder).mkdir(parents=True, exist_ok=True)
    atomic_write_json(Path(folder) / RUN_RECORD, record)


def evaluation_settings(
    model: str, params_key: str, task_id: str, limit: int | None, dtype, model_identity: str | None = None
) -> dict:
    """What an evaluation of a study was drawn with: the model (resolved, or named by `model_identity`), the sampling
    parameters' key (n, temperature, max_new_tokens, seed, stop), the task and split, the problem limit, the dtype."""
    model = model_identity or _model_identity(model)
    return {"model": model, "params": params_key, "task": task_id, "limit": limit, "dtype": dtype}


def check_evaluation(target: Path, settings: dict, run: str | None = None, scored: str | None = None) -> None:
    """An evaluation file made with ``settings`` (or before they were recorded) of this folder's run, else a
    `UserError` naming it: ``run`` is the run's name in the study (``study_evaluation.run``: the arm, ``base`` or the
    baseline), ``scored`` the folder an arm's evaluation scored, relative to the study's output folder (the harness
    records the folder it loaded as ``model``). An arm's evaluation copied from another run folder (another seed or
    setting: the same settings, the same run name) names that folder, and is refused."""
    result = read_json_object(target, _FLAG, "an evaluation result of the study")
    recorded = result.get("study_evaluation") or {}
    old = recorded.get("settings") if isinstance(recorded, dict) else None
    if not isinstance(recorded, dict) or not isinstance(old, dict | type(None)):
        raise UserError(f"{target}: its study_evaluation is not the study's record (a mapping with settings)")
    if run is not None and recorded.get("run") not in (None, run):
        raise UserError(
            f"{target}: an evaluation of run {recorded['run']!r}, not of {run!r} (a file copied from another run's "
            "folder): a study never reuses it; remove that file to score this run"
        )
    model = result.get("model")
    if scored is not None and isinstance(model, str):
        parts = Path(scored).parts
        if Path(model).parts[-len(parts) :] != parts:
            raise UserError(
                f"{target}: an evaluation of {model}, not of this run's folder ({scored}; a file copied from another "
                "run's folder): a study never reuses it; remove that file to score this run"
            )
    if old is None:
        return
    old = {**old, "model": model_record_name(old["model"])} if isinstance(old.get("model"), str) else old
    if old == settings:
        return
    what = next(key for key in {**settings, **old} if old.get(key) != settings.get(key))
    raise UserError(
        f"{target}: scored with another {what} ({old.get(what)!r}, this study: {settings.get(what)!r}): a study never "
        "reuses it; use another --out, or remove that file"
    )
