"""Publish a trained checkpoint to the Hugging Face Hub: the LoRA adapter (or full weights), or with --merge the
adapter folded into the full-precision base, plus a model card with the eval harness's pass@k / maj@k results.

    python scripts/publish.py outputs/qlora --repo-id ORG/NAME [--merge] [--eval-report DIR] [--private] [--dry-run]

--dry-run writes exactly the folder that would be uploaded (default: CHECKPOINT-hub next to the checkpoint) and
prints its path. The folder is assembled under a temporary name and renamed at the end, so a failure never leaves a
folder that looks complete.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
MODEL_WEIGHTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
MODEL_FILES = ("config.json", "generation_config.json")
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
)
CONFIG_FILE = "grpo_ext_config.yaml"


class PublishError(ValueError):
    """Bad input or a failed upload: reported as one line by `run_cli`."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="publish.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", help="training output folder or checkpoint-N (adapter or full weights)")
    parser.add_argument("--repo-id", required=True, help="Hub repository, ORG/NAME")
    parser.add_argument("--merge", action="store_true", help="fold the LoRA adapter into the full-precision base")
    parser.add_argument("--eval-report", help="evaluation harness output folder (its report.json) for the card")
    parser.add_argument("--eval-model", help="which model of a multi-model eval report is this checkpoint")
    parser.add_argument("--private", action="store_true", help="create the Hub repository as private")
    parser.add_argument("--dry-run", action="store_true", help="write the folder that would be uploaded; no upload")
    parser.add_argument("--output-dir", help="--dry-run destination (default: CHECKPOINT-hub)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output-dir")
    parser.add_argument(
        "--base-model",
        help="base model (hub id or folder) to merge into and to name in the card and adapter_config.json "
        "(default: the adapter's base_model_name_or_path)",
    )
    parser.add_argument("--license", help="card license (default: apache-2.0 for the embedded base, else other)")
    parser.add_argument(
        "--dtype",
        choices=["float32", "bfloat16", "float16"],
        help="dtype of merged weights (default: the base's stored dtype)",
    )
    parser.add_argument("--commit-message", default="Upload with grpo-ext scripts/publish.py")
    return parser.parse_args(argv)


# ---- what the checkpoint holds ----------------------------------------------------------------------------------


def checkpoint_kind(folder: Path) -> str:
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


def _model_weight_files(folder: Path) -> list[Path]:
    files = [folder / name for name in MODEL_WEIGHTS if (folder / name).is_file()]
    files += sorted(folder.glob("model-*-of-*.safetensors")) + sorted(folder.glob("pytorch_model-*-of-*.bin"))
    return files


def adapter_base(folder: Path) -> str | None:
    try:
        return json.loads((folder / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    except (OSError, json.JSONDecodeError) as err:
        raise PublishError(f"CHECKPOINT: cannot read {folder / ADAPTER_CONFIG} ({err})") from err


def _resolve_base(name: str | None, folder: Path) -> str:
    from grpo_ext.models import resolve_model_path

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
    shutil.copy2(checkpoint / ADAPTER_CONFIG, dest / ADAPTER_CONFIG)
    for name in ADAPTER_WEIGHTS:
        if (checkpoint / name).is_file():
            shutil.copy2(checkpoint / name, dest / name)
    if base_override:  # point the uploaded adapter at the base users can download
        config = json.loads((dest / ADAPTER_CONFIG).read_text())
        config["base_model_name_or_path"] = base_override
        (dest / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    _copy_tokenizer(checkpoint, base_override or adapter_base(checkpoint), dest)


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
    model = PeftModel.from_pretrained(model, str(checkpoint)).merge_and_unload()
    target = getattr(torch, dtype) if dtype else stored if isinstance(stored, torch.dtype) else torch.float32
    model = model.to(target)
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    model.save_pretrained(dest)
    _copy_tokenizer(checkpoint, base, dest)


def _replace_dir(staging: Path, out: Path, overwrite: bool) -> None:
    if out.exists():
        if not overwrite:
            raise PublishError(f"--output-dir: {out} exists; remove it or pass --overwrite")
        trash = out.with_name(f".{out.name}.old")
        shutil.rmtree(trash, ignore_errors=True)
        out.rename(trash)
        staging.rename(out)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        staging.rename(out)


def build_folder(args: argparse.Namespace, staging: Path) -> str:
    """Write the upload into `staging`; returns the checkpoint kind as uploaded (adapter / merged / model)."""
    from grpo_ext.evaluation.report import read_report
    from grpo_ext.hub import build_model_card, trained_with

    checkpoint = Path(args.checkpoint)
    kind = checkpoint_kind(checkpoint)
    if args.merge and kind == "model":
        raise PublishError(
            f"--merge: {checkpoint} holds full model weights, not a LoRA adapter; publish it without --merge"
        )
    report = read_report(args.eval_report, args.eval_model) if args.eval_report else None
    summary = trained_with(checkpoint)

    if kind == "adapter":
        recorded = adapter_base(checkpoint)
        base_name = args.base_model or recorded
        if args.merge:
            write_merged(checkpoint, staging, _resolve_base(base_name, checkpoint), args.dtype)
            kind = "merged"
        else:
            write_adapter(checkpoint, staging, args.base_model)
    else:
        base_name = args.base_model or (summary or {}).get("base_model")
        write_model(checkpoint, staging)
    _copy_config_record(checkpoint, staging)
    card = build_model_card(
        checkpoint, args.repo_id, report, kind=kind, base_model=base_name, license=args.license, summary=summary
    )
    card.save(staging / "README.md")
    return kind


def upload(folder: Path, args: argparse.Namespace) -> str:
    from huggingface_hub import HfApi

    api = HfApi()
    try:
        url = api.create_repo(args.repo_id, private=args.private, exist_ok=True, repo_type="model")
        api.upload_folder(
            repo_id=args.repo_id, folder_path=str(folder), commit_message=args.commit_message, repo_type="model"
        )
    except Exception as err:  # network, auth, offline mode: one line, nothing left behind
        raise PublishError(f"upload to {args.repo_id} failed: {type(err).__name__}: {err}") from err
    return str(url)


def main(argv: list[str]) -> Path | str:
    from huggingface_hub.utils import validate_repo_id

    args = parse_args(argv)
    try:
        validate_repo_id(args.repo_id)
    except ValueError as err:
        raise PublishError(f"--repo-id: {err}") from err
    checkpoint = Path(args.checkpoint).expanduser()
    args.checkpoint = str(checkpoint)
    if args.eval_report and not Path(args.eval_report).exists():
        raise PublishError(f"--eval-report: no such file or folder: {args.eval_report}")

    if args.dry_run:
        out = Path(args.output_dir) if args.output_dir else checkpoint.with_name(checkpoint.name + "-hub")
        if out.exists() and not args.overwrite:
            raise PublishError(f"--output-dir: {out} exists; remove it or pass --overwrite")
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.partial-"))
        staging.chmod(0o755)  # mkdtemp makes it private; the result is an ordinary folder
    else:
        staging = Path(tempfile.mkdtemp(prefix="grpo-ext-publish-"))
    try:
        kind = build_folder(args, staging)
        if args.dry_run:
            _replace_dir(staging, out, args.overwrite)
            print(f"dry run: the {kind} upload for {args.repo_id} is in:", file=sys.stderr)
            print(out)
            return out
        url = upload(staging, args)
        print(f"uploaded the {kind} to {url}")
        return url
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(staging)


if __name__ == "__main__":
    from grpo_ext.cli import run_cli

    run_cli(main)
