"""Where a model comes from: `embedded` names the shipped base model, a real model's name (`smollm2-135m-instruct`,
see `grpo_ext.real_model_fetch`) its converted folder in the cache, a local folder is itself, anything else is a hub id.
The lowest floor of the house: training, evaluation and publishing all resolve names here."""

from __future__ import annotations

from pathlib import Path

from grpo_ext.real_model_fetch import MAKE_COMMAND, REAL_MODELS, is_complete, real_model_dir

EMBEDDED_MODEL_DIR = Path(__file__).parent / "assets" / "embedded"
EMBEDDED_NAME = "embedded"


def resolve_model_path(name_or_path: str) -> str:
    """`embedded` -> the shipped model folder; `smollm2-135m-instruct` -> its converted folder (a
    `FileNotFoundError` naming `make real-model` when it is not there yet); an existing local folder -> itself;
    anything else is a hub id.

    A path that looks local but does not exist is a `FileNotFoundError` naming it here rather than a confusing hub
    lookup later: absolute, starting with `.` or `~`, more than one `/`, or a relative path whose first component
    exists here (`outputs/run1` when `outputs/` does: a hub id `org/name` has no local `org`).
    """
    if name_or_path == EMBEDDED_NAME:
        if not (EMBEDDED_MODEL_DIR / "config.json").is_file():
            raise FileNotFoundError(
                f"the embedded model is missing from {EMBEDDED_MODEL_DIR}; build it with "
                "`python scripts/build_base_model.py`"
            )
        return str(EMBEDDED_MODEL_DIR)
    if name_or_path in REAL_MODELS:
        folder = real_model_dir(name_or_path)
        if not is_complete(folder, name_or_path):
            raise FileNotFoundError(
                f"model_name_or_path: {name_or_path} is not fetched yet (expected at {folder}); make it with "
                f"`{MAKE_COMMAND}`"
            )
        return str(folder)
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not (path / "config.json").is_file() and not (path / "adapter_config.json").is_file():
            raise FileNotFoundError(f"model folder {path} has neither config.json nor adapter_config.json")
        return str(path)
    if name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1:
        raise FileNotFoundError(f"model_name_or_path: no such model folder: {name_or_path}")
    if len(path.parts) > 1 and Path(path.parts[0]).exists():
        raise FileNotFoundError(
            f"model_name_or_path: no such model folder: {name_or_path} ({path.parts[0]}/ exists here, so it is taken "
            "for a local path, not a hub id)"
        )
    return name_or_path


def known_model_name(path: str) -> str | None:
    """The name (`embedded`, `smollm2-135m-instruct`, ...) whose folder `path` is, else None: what a results file
    records instead of a folder of this machine."""
    folder = Path(path).expanduser().resolve()
    if folder == EMBEDDED_MODEL_DIR.resolve():
        return EMBEDDED_NAME
    return next((name for name in REAL_MODELS if folder == real_model_dir(name).resolve()), None)


def model_record_name(name_or_path: str) -> str:
    """How a record that is compared later (a study's provenance, an iterative run's settings) names a model, the same
    from every clone and machine: a name grpo-ext knows (`embedded`, `smollm2-135m-instruct`) for its folder, a folder
    inside the repository relative to it, another local folder resolved, a hub id as given.

    Records written before this kept the resolved folder (`/work/<clone>/grpo_ext/assets/embedded`,
    `/root/.cache/grpo-ext/models/smollm2-135m-instruct`); read through this they name the same model: the shipped base
    of any clone is `embedded`, and a real model's cache folder (`<cache>/models/<name>`, converted from the pinned
    file) is its name on any machine, so a study or loop recorded in another clone, or by another user, resumes."""
    from grpo_ext.io import portable_path
    from grpo_ext.real_model_fetch import cache_root

    if name_or_path == EMBEDDED_NAME or name_or_path in REAL_MODELS:
        return name_or_path
    path = Path(name_or_path).expanduser()
    if path.exists() and (known := known_model_name(str(path))):
        return known
    if path.is_absolute():
        parts = path.parts
        if parts[-3:] == EMBEDDED_MODEL_DIR.parts[-3:]:  # .../grpo_ext/assets/embedded: another clone's shipped base
            return EMBEDDED_NAME
        in_cache = parts[-3:-1] == ("grpo-ext", "models") or path.parent == cache_root() / "models"
        if in_cache and parts[-1] in REAL_MODELS:  # a real model's cache folder of another machine or user
            return parts[-1]
    if path.exists():
        return portable_path(path.resolve())
    return name_or_path
