"""Publish a trained checkpoint to the Hugging Face Hub: the LoRA adapter (or full weights), or with --merge the
adapter folded into the full-precision base, plus a model card with the eval harness's pass@k / maj@k results.

    python scripts/publish.py outputs/qlora --repo-id ORG/NAME [--merge] [--eval-report DIR] [--private] [--dry-run]

--dry-run writes exactly the folder that would be uploaded (default: CHECKPOINT-hub next to the checkpoint) and
prints its path; a hidden list of the files it wrote lets a later --overwrite replace it, and only such a folder.
The folder is assembled under a temporary name and renamed at the end, so a failure never leaves a folder that
looks complete. Before anything is uploaded the checkpoint and the assembled folder are checked (a run
that did not finish, torn weights, an adapter naming a base folder of this machine, unexpected files) and the list
of files is printed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def parse_args(argv: list[str]) -> argparse.Namespace:
    from grpo_ext.evaluation.cli import HarnessArgumentParser  # a bad flag is one line, exit 2

    parser = HarnessArgumentParser(prog="publish.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", help="training output folder or checkpoint-N (adapter or full weights)")
    parser.add_argument("--repo-id", required=True, help="Hub repository, ORG/NAME")
    parser.add_argument("--merge", action="store_true", help="fold the LoRA adapter into the full-precision base")
    parser.add_argument("--eval-report", help="evaluation harness output folder (its report.json) for the card")
    parser.add_argument("--eval-model", help="which model of a multi-model eval report is this checkpoint")
    parser.add_argument("--private", action="store_true", help="create the Hub repository as private")
    parser.add_argument("--dry-run", action="store_true", help="write the folder that would be uploaded; no upload")
    parser.add_argument("--output-dir", help="--dry-run destination (default: CHECKPOINT-hub)")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing --output-dir, only if an earlier --dry-run wrote it (and nothing else is in it)",
    )
    parser.add_argument(
        "--base-model",
        help="base model (hub id or folder) to merge into and to name in the card and adapter_config.json "
        "(default: the adapter's base_model_name_or_path; a model grpo-ext names, e.g. smollm2-135m-instruct, by its "
        "name rather than this machine's folder)",
    )
    parser.add_argument("--license", help="card license (default: apache-2.0 for the embedded base, else other)")
    parser.add_argument(
        "--dtype",
        choices=["float32", "bfloat16", "float16"],
        help="dtype of merged weights (default: the base's stored dtype)",
    )
    parser.add_argument("--commit-message", default="Upload with grpo-ext scripts/publish.py")
    return parser.parse_args(argv)


def main(argv: list[str]) -> Path | str:
    from huggingface_hub.utils import validate_repo_id

    from grpo_ext.hub.export import PublishError, publish
    from grpo_ext.model_files import check_chat_template, check_tokenizer_files

    args = parse_args(argv)
    if args.license is not None:
        from grpo_ext.hub.card import check_license

        check_license(args.license)  # before anything is built (a newline would write keys into the card's header)
    try:
        validate_repo_id(args.repo_id)
    except ValueError as err:
        raise PublishError(f"--repo-id: {err}") from err
    checkpoint = Path(args.checkpoint).expanduser()
    if not checkpoint.is_dir():  # a hub id or a typo is not a checkpoint to publish
        raise PublishError(f"CHECKPOINT: no such folder: {args.checkpoint} (publish.py uploads a local folder)")
    # tokenizer files that load and a chat template that parses: what every user of the published model reads
    check_tokenizer_files(checkpoint, "CHECKPOINT")
    check_chat_template(checkpoint, "CHECKPOINT")
    if args.eval_report and not Path(args.eval_report).exists():
        raise PublishError(f"--eval-report: no such file or folder: {args.eval_report}")
    if args.base_model and not args.merge and Path(args.base_model).expanduser().exists():
        raise PublishError(
            f"--base-model: {args.base_model} is a local folder; without --merge the adapter names its base for "
            "everyone: give its hub id (ORG/NAME)"
        )
    output_dir = None
    if args.dry_run:
        output_dir = Path(args.output_dir) if args.output_dir else checkpoint.with_name(checkpoint.name + "-hub")

    where, checkpoint_type, files = publish(
        checkpoint,
        args.repo_id,
        output_dir=output_dir,
        overwrite=args.overwrite,
        private=args.private,
        commit_message=args.commit_message,
        merge=args.merge,
        eval_report=args.eval_report,
        eval_model=args.eval_model,
        base_model=args.base_model,
        license=args.license,
        dtype=args.dtype,
    )
    listing = ", ".join(f"{name} ({size / 1e6:.2f} MB)" for name, size in files)
    print(f"{len(files)} files, {sum(size for _, size in files) / 1e6:.2f} MB: {listing}", file=sys.stderr)
    if args.dry_run:
        print(f"dry run: the {checkpoint_type} upload for {args.repo_id} is in:", file=sys.stderr)
        print(where)
        return Path(where)
    print(f"uploaded the {checkpoint_type} to {where}")
    return where


if __name__ == "__main__":
    from grpo_ext.cli import run_cli

    run_cli(main)
