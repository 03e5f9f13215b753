"""Reward-model folders: a local folder or a hub id (fetched without pickled weights); safetensors only (never a
pickle), their tensor names and shapes read from the headers without loading the tensors."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["SAFETENSORS_FILE", "SAFETENSORS_INDEX", "reward_model_folder", "require_safetensors", "safetensors_shapes"]

SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
# What a reward model needs from a hub repository: configs, tokenizer files, chat templates, safetensors weights.
HUB_FILES = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]


def reward_model_folder(name_or_path: str | Path, field: str = "process_reward_model") -> Path:
    """A local model folder, or a hub id fetched into the hub cache (only :data:`HUB_FILES`: no pickled weights and
    no code are downloaded); errors name `field`."""
    from grpo_ext.model_paths import resolve_model_path

    folder = Path(str(name_or_path)).expanduser()
    if folder.exists():
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(f"{field}: no model folder (config.json) at {name_or_path}")
        return folder
    try:
        hub_id = resolve_model_path(str(name_or_path))  # a local-looking path that does not exist is an error
    except FileNotFoundError as err:
        raise FileNotFoundError(f"{field}: no such model folder: {name_or_path}") from err
    if Path(hub_id).is_dir():  # a name grpo_ext resolves to a shipped folder (`embedded`)
        return Path(hub_id)
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(hub_id, allow_patterns=HUB_FILES))
    except Exception as err:  # offline, unknown repository, no access: one message naming the id
        raise FileNotFoundError(
            f"{field}: {name_or_path!r} is not a local model folder and could not be fetched from the hub "
            f"({type(err).__name__}: {err})"
        ) from err


def require_safetensors(folder: str | Path) -> list[str]:
    """The safetensors weight files of a model folder (one file or the shards of an index); an error naming the
    folder when it has none (a ``pytorch_model.bin`` is never loaded)."""
    folder = Path(folder)
    if (folder / SAFETENSORS_INDEX).is_file():
        return sorted(set(json.loads((folder / SAFETENSORS_INDEX).read_text())["weight_map"].values()))
    if (folder / SAFETENSORS_FILE).is_file():
        return [SAFETENSORS_FILE]
    raise FileNotFoundError(
        f"process_reward_model: no safetensors weights in {folder} ({SAFETENSORS_FILE} or {SAFETENSORS_INDEX}); "
        "weights are only loaded from safetensors (convert pickled weights once, where you trust them, with "
        "save_pretrained(..., safe_serialization=True))"
    )


def safetensors_shapes(folder: str | Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """Every tensor name in a model folder's safetensors weights -> (shape, file name), read from the headers."""
    from safetensors import safe_open

    shapes = {}
    for name in require_safetensors(folder):
        with safe_open(str(Path(folder) / name), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                shapes[key] = (tuple(f.get_slice(key).get_shape()), name)
    return shapes
