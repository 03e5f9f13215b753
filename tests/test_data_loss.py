"""Issue 26's five ways to lose or corrupt data, each closed: publish --overwrite deletes only an earlier export, one
run at a time per output folder, the sample cache sees the adapter's base and the tokenizer, a checkpoint save that
fails any way leaves the previous checkpoint resumable, and a PRM without its head weights is refused."""

import json
import shutil

import pytest

from grpo_ext.errors import UserError
from grpo_ext.models import EMBEDDED_MODEL_DIR
from scripts import publish

# ---- 1. publish --overwrite ---------------------------------------------------------------------------------------


def dry_run(checkpoint, out, *flags):
    return publish.main([str(checkpoint), "--repo-id", "me/x", "--dry-run", "--output-dir", str(out), *flags])


@pytest.fixture
def run_folder(tmp_path):
    """A finished run's folder (a full model) with its training record."""
    run = tmp_path / "runs" / "run"
    shutil.copytree(EMBEDDED_MODEL_DIR, run)
    (run / "trainer_state.json").write_text('{"global_step": 3}')
    return run


def test_overwrite_never_deletes_the_source_or_a_folder_holding_it(run_folder, tmp_path):
    before = sorted(p.name for p in run_folder.iterdir())
    for out in (run_folder, run_folder.parent, tmp_path):
        with pytest.raises(UserError, match="is the checkpoint being published or a folder containing it"):
            dry_run(run_folder, out, "--overwrite")
    assert sorted(p.name for p in run_folder.iterdir()) == before


def test_overwrite_replaces_only_a_folder_an_export_wrote_and_nothing_else(run_folder, tmp_path):
    repository = tmp_path / "repo"
    repository.mkdir()
    (repository / "main.py").write_text("print('mine')\n")
    with pytest.raises(UserError, match=r"repo was not written by publish\.py"):
        dry_run(run_folder, repository, "--overwrite")
    assert (repository / "main.py").read_text() == "print('mine')\n"

    out = tmp_path / "export"
    dry_run(run_folder, out)
    assert dry_run(run_folder, out, "--overwrite") == out  # an earlier export is replaced
    assert (out / "model.safetensors").is_file()
    (out / "notes.txt").write_text("my notes")  # the user added a file to it since
    with pytest.raises(UserError, match=r"holds files the earlier export did not write \(notes\.txt\)"):
        dry_run(run_folder, out, "--overwrite")
    assert (out / "notes.txt").read_text() == "my notes"
