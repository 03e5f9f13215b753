"""The folder a checkpoint is uploaded as: the LoRA adapter (or the full weights), or the adapter merged into its
full-precision base, plus the tokenizer, the training record and the model card.

What goes in is checked on both sides: the checkpoint (a training run that did not finish, a torn weights file, an
adapter whose base is a folder of this machine) and the written folder (`check_upload_folder`: every weights file
opens, every JSON parses, nothing but the model's files). Every file the upload is made of is read from inside the
checkpoint (`check_sources`): a symbolic link out of it is refused, never followed, so no other file of the machine
(a token, a key) reaches a public repository.

Where the folder goes (a dry run's folder, replaced only when an earlier dry run wrote it, or the Hub) is
`grpo_ext.hub.export`'s: this module writes into an empty folder it is given and never deletes anything.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from grpo_ext.errors import UserError, user_file
from grpo_ext.hub.card import build_model_card
from grpo_ext.hub.eval_report import read_checked_report
from grpo_ext.hub.training import is_embedded, trained_with
from grpo_ext.model_files import TOKENIZER_FILES, check_weights
from grpo_ext.model_paths import known_model_name
from grpo_ext.run_record import CONFIG_FILE

__all__ = [
    "UPLOAD_FILES",
    "PublishError",
    "check_sources",
    "check_upload_folder",
    "checkpoint_type_of",
    "write_merged",
    "write_upload_folder",
]

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
MODEL_WEIGHTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
MODEL_FILES = ("config.json", "generation_config.json")
#: Every name an upload folder may hold (besides weight shards, `_is_shard`): a model's files and the model card.
UPLOAD_FILES = frozenset(
    {*ADAPTER_WEIGHTS, *MODEL_WEIGHTS, *MODEL_FILES, *TOKENIZER_FILES, ADAPTER_CONFIG, CONFIG_FILE, "README.md"}
)


def _is_shard(name: str) -> bool:
    return name.startswith(("model-", "pytorch_model-")) and name.endswith((".safetensors", ".bin"))


class PublishError(UserError):
    """Bad input or a failed upload: reported as one line by `run_cli`."""


# ---- what the checkpoint holds ----------------------------------------------------------------------------------


def checkpoint_type_of(folder: Path) -> str:
    """`adapter` (LoRA adapter) or `model` (full weights); anything else is an error naming what is missing."""
    if not folder.is_dir():
        raise PublishError(f"CHECKPOINT: no such folder: {folder}")
    if (folder / ADAPTER_CONFIG).is_file():
        if not any((folder / name).is_file() for name in ADAPTER_WEIGHTS):
            raise PublishError(
                f"CHECKPOINT: {folder} has {ADAPTER_CONFIG} but no adapter weights ({ADAPTER_WEIGHTS[0]})"
            )
        return "adapter"
    if (folder / "config.json").is_file():
        if not _model_weight_files(folder):
            raise PublishError(f"CHECKPOINT: {folder} has config.json but no model weights (model.safetensors)")
        return "model"
    raise PublishError(
        f"CHECKPOINT: {folder} holds neither a LoRA adapter ({ADAPTER_CONFIG} + {ADAPTER_WEIGHTS[0]}) "
        "nor model weights (config.json + model.safetensors)"
    )


def check_run_finished(folder: Path) -> None:
    """The training run that wrote `folder` finished (when scripts/train.py recorded a run status there)."""
    from grpo_ext.checkpoints import RUN_STATUS_FILE, read_run_status

    if not folder.is_dir():
        return  # checkpoint_type_of names the missing folder
    status = read_run_status(folder)
    if status is not None and status["status"] != "complete":
        why = f": {status['error']}" if status.get("error") else ""
        raise PublishError(
            f"CHECKPOINT: the training run in {folder} did not finish ({RUN_STATUS_FILE}: {status['status']}{why}); "
            "publish one of its checkpoint-N folders, or finish the run"
        )


def check_weights_open(folder: Path) -> None:
    """Every safetensors file of the checkpoint opens (none torn by a full disk or a cut download)."""
    try:
        check_weights(folder, "CHECKPOINT")
    except UserError as err:
        raise PublishError(str(err)) from err


def _model_weight_files(folder: Path) -> list[Path]:
    files = [folder / name for name in MODEL_WEIGHTS if (folder / name).is_file()]
    files += sorted(folder.glob("model-*-of-*.safetensors")) + sorted(folder.glob("pytorch_model-*-of-*.bin"))
    return files


def adapter_base(folder: Path) -> str | None:
    try:
        return json.loads((folder / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    except (OSError, json.JSONDecodeError) as err:
        raise PublishError(f"CHECKPOINT: cannot read {folder / ADAPTER_CONFIG} ({err})") from err


def _named_base(base: str | None) -> str | None:
    """`base` as an upload names it: PEFT records the folder the base was loaded from, and for a model grpo-ext names
    (`embedded`, `smollm2-135m-instruct`) that folder is this machine's cache; its name resolves on any machine with
    grpo-ext (`grpo_ext.model_paths.resolve_model_path`) and says nothing about this one."""
    return (known_model_name(base) or base) if base else base


def _check_base_is_downloadable(base: str | None, folder: Path) -> None:
    """An uploaded adapter names its base for everyone: a folder of this machine would be a path no one else has (and
    would publish its name). The shipped embedded model is the exception: it comes with grpo-ext."""
    if base and not is_embedded(base) and (os.path.isabs(os.path.expanduser(base)) or os.path.exists(base)):
        raise PublishError(
            f"CHECKPOINT: {folder / ADAPTER_CONFIG} names the local base model {base!r}, which others cannot "
            "download; pass --base-model ORG/NAME (the hub id of the same base)"
        )


def _resolve_base(name: str | None, folder: Path) -> str:
    from grpo_ext.model_paths import resolve_model_path

    if not name:
        raise PublishError(f"CHECKPOINT: {folder / ADAPTER_CONFIG} names no base model; pass --base-model")
    try:
        return resolve_model_path(name)
    except FileNotFoundError as err:
        raise PublishError(f"base model {name!r} not found ({err}); pass --base-model") from err


# ---- writing the folder -----------------------------------------------------------------------------------------


def _copy_tokenizer(checkpoint: Path, base: str | None, dest: Path) -> None:
    copied = [name for name in TOKENIZER_FILES if (checkpoint / name).is_file()]
    for name in copied:
        shutil.copy2(checkpoint / name, dest / name)
    if not copied and base is not None:  # a checkpoint saved without its tokenizer: take the base's
        from transformers import AutoTokenizer

        try:
            AutoTokenizer.from_pretrained(_resolve_base(base, checkpoint)).save_pretrained(dest)
        except OSError as err:
            message = f"CHECKPOINT: {checkpoint} has no tokenizer and the base's cannot be loaded ({err})"
            raise PublishError(message) from err


def _copy_config_record(checkpoint: Path, dest: Path) -> None:
    for candidate in (checkpoint / CONFIG_FILE, checkpoint.parent / CONFIG_FILE):
        if candidate.is_file():
            shutil.copy2(candidate, dest / CONFIG_FILE)
            return


def write_adapter(checkpoint: Path, dest: Path, base_override: str | None) -> None:
    recorded = adapter_base(checkpoint)
    base = base_override or _named_base(recorded)
    _check_base_is_downloadable(base, checkpoint)
    shutil.copy2(checkpoint / ADAPTER_CONFIG, dest / ADAPTER_CONFIG)
    for name in ADAPTER_WEIGHTS:
        if (checkpoint / name).is_file():
            shutil.copy2(checkpoint / name, dest / name)
    if base != recorded:  # point the uploaded adapter at the base users can download, or name it
        config = json.loads((dest / ADAPTER_CONFIG).read_text())
        config["base_model_name_or_path"] = base
        (dest / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    _copy_tokenizer(checkpoint, base, dest)


def write_model(checkpoint: Path, dest: Path) -> None:
    files = [checkpoint / name for name in MODEL_FILES if (checkpoint / name).is_file()]
    for path in files + _model_weight_files(checkpoint):
        shutil.copy2(path, dest / path.name)
    config = json.loads((dest / "config.json").read_text())
    if "quantization_config" in config:
        raise PublishError(f"CHECKPOINT: {checkpoint} holds quantised weights; publish the adapter or --merge it")
    _copy_tokenizer(checkpoint, None, dest)


def write_merged(checkpoint: Path, dest: Path, base: str, dtype: str | None) -> None:
    """Base loaded in float32 (never 4-bit) + adapter, merged, saved as a plain transformers folder."""
    import torch
    from peft import PeftModel
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        stored = getattr(AutoConfig.from_pretrained(base), "dtype", None)
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32, device_map=None)
    except OSError as err:  # a hub id while offline, a folder that moved: say which base, not a traceback
        raise PublishError(f"--merge: cannot load the base model {base!r} ({err}); pass --base-model") from err
    try:
        model = PeftModel.from_pretrained(model, str(checkpoint)).merge_and_unload()
    except (RuntimeError, ValueError, KeyError) as err:  # torch's "size mismatch for ...", peft's missing modules
        reason = str(err).strip().splitlines()
        detail = next((line.strip() for line in reason if "size mismatch" in line), reason[0] if reason else "")
        raise PublishError(
            f"--merge: the adapter in {checkpoint} does not fit the base model {base!r} ({type(err).__name__}: "
            f"{detail}); pass the --base-model it was trained on"
        ) from err
    target = getattr(torch, dtype) if dtype else stored if isinstance(stored, torch.dtype) else torch.float32
    model = model.to(target)
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    model.save_pretrained(dest)
    _copy_tokenizer(checkpoint, base, dest)


def check_sources(checkpoint: Path) -> None:
    """Every file the upload is read from lies inside `checkpoint` (and the training record of its run folder, read
    when the checkpoint has none, inside that folder): a symbolic link leading out is refused, never followed: it
    would put any file of this machine into a public upload. Checked with `grpo_ext.run_folder.inside`."""
    from grpo_ext.checkpoints import RUN_STATUS_FILE
    from grpo_ext.run_folder import inside

    read = UPLOAD_FILES | {"trainer_state.json", RUN_STATUS_FILE}
    try:
        for path in sorted(checkpoint.iterdir()):
            if path.name in read or _is_shard(path.name):
                inside(checkpoint, path.name, field_name="CHECKPOINT")
        if not (checkpoint / CONFIG_FILE).exists():
            inside(checkpoint.parent, CONFIG_FILE, field_name="CHECKPOINT")
    except UserError as err:
        raise PublishError(str(err)) from None


def write_upload_folder(
    checkpoint: Path,
    dest: Path,
    repo_id: str,
    *,
    merge: bool = False,
    eval_report: str | None = None,
    eval_model: str | None = None,
    base_model: str | None = None,
    license: str | None = None,
    dtype: str | None = None,
) -> str:
    """Write the upload of `checkpoint` into the empty folder `dest`; returns its checkpoint type as uploaded
    (`adapter`, `merged` or `model`). The arguments are scripts/publish.py's flags."""
    check_sources(checkpoint)  # first: nothing is read through a link out of the checkpoint
    check_run_finished(checkpoint)
    checkpoint_type = checkpoint_type_of(checkpoint)
    check_weights_open(checkpoint)
    if merge and checkpoint_type == "model":
        raise PublishError(
            f"--merge: {checkpoint} holds full model weights, not a LoRA adapter; publish it without --merge"
        )
    report = read_checked_report(eval_report, eval_model, checkpoint) if eval_report else None
    summary = trained_with(checkpoint)

    if checkpoint_type == "adapter":
        base_name = base_model or _named_base(adapter_base(checkpoint))
        if merge:
            write_merged(checkpoint, dest, _resolve_base(base_name, checkpoint), dtype)
            checkpoint_type = "merged"
        else:
            write_adapter(checkpoint, dest, base_model)
    else:
        base_name = base_model or (summary or {}).get("base_model")
        write_model(checkpoint, dest)
    _copy_config_record(checkpoint, dest)
    card = build_model_card(
        checkpoint,
        repo_id,
        report,
        checkpoint_type=checkpoint_type,
        base_model=base_name,
        license=license,
        summary=summary,
    )
    card.save(dest / "README.md")
    return checkpoint_type


def check_upload_folder(folder: Path) -> list[tuple[str, int]]:
    """`(name, bytes)` of every file `folder` would upload, after checking it: only a model's files (weights, configs,
    tokenizer, card, training record; no subfolders), every safetensors file opens, every JSON file parses, and the
    card is there. A `PublishError` names the first file that fails."""
    manifest = []
    for path in sorted(folder.iterdir()):
        sharded = path.name.startswith("model-") and path.suffix == ".safetensors"
        if not path.is_file() or not (path.name in UPLOAD_FILES or sharded):
            raise PublishError(f"upload folder: {path.name} is not a file a model repository needs; not uploaded")
        try:
            with user_file(path, "upload folder"):
                if path.suffix == ".json":
                    json.loads(path.read_text())
        except UserError as err:
            raise PublishError(str(err)) from err
        manifest.append((path.name, path.stat().st_size))
    if "README.md" not in dict(manifest):
        raise PublishError(f"upload folder: {folder} has no model card (README.md)")
    try:
        check_weights(folder, "upload folder")
    except UserError as err:
        raise PublishError(str(err)) from err
    return manifest
