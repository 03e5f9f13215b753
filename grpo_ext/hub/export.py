"""Publishing a checkpoint: its upload folder (`grpo_ext.hub.upload_folder`) assembled under a temporary name, then
either kept as a dry run's folder or uploaded to the Hub.

`publish(...)` (what scripts/publish.py calls) assembles the folder under a temporary name and renames it at the
end, so a failure never leaves a folder that looks complete; with `dry_run` the folder is kept, else uploaded and
removed. It returns the file list `check_upload_folder` checked.

A dry run's folder carries the record of `grpo_ext.run_folder` (`FOLDER_RECORD`: this writer and the files it wrote;
`EXPORT_MARKER` in folders of earlier versions): `--overwrite` replaces only such a folder, holding nothing else, and
never the checkpoint itself or a folder that contains it (`grpo_ext.run_folder.check_only_ours`).

What goes into the folder, and the checks of the checkpoint and of the folder, are `grpo_ext.hub.upload_folder`'s;
their names are importable from here too, as they were before the folder had a module of its own.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

from grpo_ext.errors import UserError
from grpo_ext.hub.upload_folder import (
    UPLOAD_FILES,
    PublishError,
    check_sources,
    check_upload_folder,
    checkpoint_type_of,
    write_merged,
    write_upload_folder,
)
from grpo_ext.io import atomic_write_json

__all__ = [
    "EXPORT_MARKER",
    "PUBLISH_WRITER",
    "UPLOAD_FILES",
    "PublishError",
    "check_overwritable",
    "check_sources",
    "check_upload_folder",
    "checkpoint_type_of",
    "publish",
    "write_merged",
    "write_upload_folder",
]

#: How a dry run's folder names its writer in its record (`grpo_ext.run_folder.FOLDER_RECORD`).
PUBLISH_WRITER = "scripts/publish.py"
#: The record of dry runs before `grpo_ext.run_folder.FOLDER_RECORD` (the files export wrote): still honoured.
EXPORT_MARKER = ".grpo_ext_export.json"


def check_overwritable(out: Path, checkpoint: Path) -> None:
    """`out` may be deleted by `--overwrite`: a folder an earlier export wrote (its record) holding only the files that
    export listed (`grpo_ext.run_folder.check_only_ours`), and neither the checkpoint being published nor a folder
    containing it. Anything else is a `PublishError`: a user's folder named by mistake is never deleted."""
    from grpo_ext.run_folder import check_only_ours

    source = checkpoint.resolve()
    if out.resolve() == source or out.resolve() in source.parents:
        raise PublishError(
            f"--output-dir: {out} is the checkpoint being published or a folder containing it; --overwrite never "
            "deletes the source: choose another --output-dir"
        )
    try:
        check_only_ours(out, writer=PUBLISH_WRITER, field_name="--output-dir", legacy_record=EXPORT_MARKER)
    except UserError as err:
        raise PublishError(str(err)) from None


def _replace_dir(staging: Path, out: Path, overwrite: bool, checkpoint: Path) -> None:
    from grpo_ext.run_folder import FOLDER_RECORD

    files = sorted(p.name for p in staging.iterdir())
    atomic_write_json(staging / FOLDER_RECORD, {"writer": PUBLISH_WRITER, "files": files})
    if out.exists() or out.is_symlink():
        if not overwrite:
            raise PublishError(f"--output-dir: {out} exists; remove it or pass --overwrite")
        check_overwritable(out, checkpoint)  # again: the folder may have changed while the export was written
        trash = out.with_name(f".{out.name}.old")
        shutil.rmtree(trash, ignore_errors=True)
        out.rename(trash)
        staging.rename(out)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        staging.rename(out)


def upload(folder: Path, repo_id: str, *, private: bool = False, commit_message: str = "Upload") -> str:
    """Create the Hub repository if needed and upload `folder`; returns the repository's URL."""
    from huggingface_hub import HfApi

    api = HfApi()
    try:
        url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        api.upload_folder(repo_id=repo_id, folder_path=str(folder), commit_message=commit_message, repo_type="model")
    except Exception as err:  # network, auth, offline mode: one line, nothing left behind
        raise PublishError(f"upload to {repo_id} failed: {type(err).__name__}: {err}") from err
    return str(url)


def publish(
    checkpoint: Path,
    repo_id: str,
    *,
    output_dir: Path | None = None,
    overwrite: bool = False,
    private: bool = False,
    commit_message: str = "Upload with grpo-ext scripts/publish.py",
    **folder_kwargs,
) -> tuple[str, str, list[tuple[str, int]]]:
    """`(where, checkpoint type, files)`: with `output_dir` (a dry run) the upload folder is written there and `where`
    is its path; without, it is uploaded to `repo_id` and `where` is the URL. `files` is `check_upload_folder`'s list
    of what was (or would be) uploaded. `folder_kwargs` go to `write_upload_folder`."""
    if output_dir is not None:
        if output_dir.exists() or output_dir.is_symlink():
            if not overwrite:
                raise PublishError(f"--output-dir: {output_dir} exists; remove it or pass --overwrite")
            check_overwritable(output_dir, checkpoint)  # before any work: refused folders cost nothing
        output_dir.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=output_dir.parent, prefix=f".{output_dir.name}.partial-"))
        staging.chmod(0o755)  # mkdtemp makes it private; the result is an ordinary folder
    else:
        staging = Path(tempfile.mkdtemp(prefix="grpo-ext-publish-"))
    try:
        checkpoint_type = write_upload_folder(checkpoint, staging, repo_id, **folder_kwargs)
        files = check_upload_folder(staging)
        if output_dir is not None:
            _replace_dir(staging, output_dir, overwrite, checkpoint)
            return str(output_dir), checkpoint_type, files
        url = upload(staging, repo_id, private=private, commit_message=commit_message)
        return url, checkpoint_type, files
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(staging)
