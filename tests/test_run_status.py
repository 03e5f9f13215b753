"""scripts/train.py records whether a run finished; a run that scored no reward fails instead of saving a model; the
resolved config names no folder of the machine; publishing refuses an unfinished run and lists what it uploads."""

import json

import pytest
import yaml

from grpo_ext.checkpoints import RUN_STATUS_FILE, read_run_status
from grpo_ext.errors import UserError
from grpo_ext.run_record import CONFIG_FILE
from scripts import publish, train
from tests.trainer_utils import TRAIN_ARGV

FAST = [*TRAIN_ARGV, "--max_steps", "1"]


def no_reward(completions, **kwargs):
    """A reward function that never scores (e.g. it reads a column the dataset does not have)."""
    return [None] * len(completions)


def test_a_finished_run_is_marked_complete_and_records_portable_paths(tmp_path, capsys):
    out = tmp_path / "run"
    train.main([*FAST, "--output_dir", str(out)])
    status = read_run_status(out)
    assert status["status"] == "complete" and status["global_step"] == 1
    resolved = yaml.safe_load((out / CONFIG_FILE).read_text())
    assert resolved["model"]["model_name_or_path"] == "embedded"  # not /<this machine>/grpo_ext/assets/embedded
    assert resolved["training"]["output_dir"] == "."  # the record's own folder
    assert "training steps: 1\n" in (out / "README.md").read_text()  # the final model's card
    with pytest.raises(UserError, match="holds a finished run"):  # a second run would mix with this one
        train.main([*FAST, "--output_dir", str(out), "--max_steps", "2"])
    assert read_run_status(out)["global_step"] == 1

    where = tmp_path / "upload"
    publish.main([str(out), "--repo-id", "me/run", "--dry-run", "--output-dir", str(where)])
    listing = capsys.readouterr().err
    assert "model.safetensors (" in listing and "README.md (" in listing  # what would be uploaded, listed
    assert RUN_STATUS_FILE not in {p.name for p in where.iterdir()}


def test_a_run_that_scored_no_reward_fails_and_saves_no_model(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(UserError, match="reward_funcs: no completion was scored"):
        train.main([*FAST, "--output_dir", str(out), "--reward_funcs", "tests.test_run_status.no_reward"])
    status = json.loads((out / RUN_STATUS_FILE).read_text())
    assert status["status"] == "failed" and "no completion was scored" in status["error"]
    assert not (out / "model.safetensors").exists()
    with pytest.raises(UserError, match=r"did not finish \(grpo_ext_run\.json: failed"):
        publish.main([str(out), "--repo-id", "me/run", "--dry-run"])


def test_a_card_written_before_the_last_step_says_so():
    from grpo_ext.hub.card import _training_section
    from grpo_ext.hub.training import summarize_training

    summary = summarize_training({"training": {"max_steps": 300}}, steps=120)
    assert "120 of 300 planned: **an intermediate checkpoint or an unfinished run**" in _training_section(
        summary, "model"
    )
    assert "training steps: 300\n" in _training_section(summarize_training({"training": {"max_steps": 300}}), "model")


def test_portable_paths(tmp_path):
    """Results files name paths relative to the folder they describe or to the repository, never this machine's."""
    from grpo_ext.io import REPO_ROOT, portable_path

    assert portable_path(REPO_ROOT / "grpo_ext" / "assets" / "embedded") == "grpo_ext/assets/embedded"
    assert portable_path(tmp_path / "iter_1" / "policy", base=tmp_path) == "iter_1/policy"
    assert portable_path("Qwen/Qwen2.5-1.5B") == "Qwen/Qwen2.5-1.5B"  # a hub id is not a path of this machine
    assert portable_path("/elsewhere/model") == "/elsewhere/model"  # outside both: as the user gave it


class _FakeTrainer:
    """What `training_run` reads of a trainer: its args, whether it is the main process, its global step and log
    history; and where it adds its callback."""

    def __init__(self, out, main=True):
        from types import SimpleNamespace

        from grpo_ext.config import GRPOExtConfig

        self.args = GRPOExtConfig(output_dir=str(out), max_steps=3, use_cpu=True, bf16=False, report_to="none")
        self.accelerator = SimpleNamespace(is_main_process=main)
        self.state = SimpleNamespace(global_step=0, log_history=[])
        self.callbacks = []

    def add_callback(self, callback):
        self.callbacks.append(callback)

    def remove_callback(self, callback):
        self.callbacks.remove(callback)


def test_training_run_writes_the_same_record_for_any_runner(tmp_path):
    from trl import ModelConfig

    from grpo_ext.hub.training import trained_with
    from grpo_ext.run_record import training_run
    from grpo_ext.script_args import TaskFields

    trainer = _FakeTrainer(tmp_path / "ok")
    with training_run(trainer, TaskFields(task_kwargs={"max_operands": 2}), ModelConfig("embedded_x")):
        running = read_run_status(tmp_path / "ok")
        assert running["status"] == "running" and running["max_steps"] == 3
        assert not (tmp_path / "ok" / CONFIG_FILE).exists()  # the config is what was run: written at the end
        trainer.state.global_step = 3
        trainer.state.log_history.append({"loss": 0.123456, "step": 3})
    status = read_run_status(tmp_path / "ok")
    assert status["status"] == "complete" and status["global_step"] == 3
    assert status["log_history"] == [{"loss": 0.1235, "step": 3}] and not trainer.callbacks
    summary = trained_with(tmp_path / "ok")  # the card's reader finds the record
    assert summary["task"] == "arithmetic" and summary["task_kwargs"] == {"max_operands": 2}
    assert summary["planned_steps"] == 3 and summary["base_model"] == "embedded_x"

    failing = _FakeTrainer(tmp_path / "bad")
    with pytest.raises(RuntimeError, match="disk"), training_run(failing, TaskFields(), ModelConfig("m")):
        failing.state.global_step = 2
        raise RuntimeError("disk\nfull")
    status = read_run_status(tmp_path / "bad")
    assert status["status"] == "failed" and status["step"] == 2 and "disk" in status["error"]
    assert "\n" not in status["error"] and not (tmp_path / "bad" / CONFIG_FILE).exists()

    other = _FakeTrainer(tmp_path / "worker", main=False)  # only the main process writes
    with training_run(other, TaskFields(), ModelConfig("m")):
        pass
    assert not (tmp_path / "worker").exists()


def test_loading_the_trainer_does_not_load_the_model_card_stack():
    import subprocess
    import sys

    code = (
        "import sys, grpo_ext.trainer; "
        "print('grpo_ext.hub.card' in sys.modules, 'grpo_ext.evaluation.report' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_sigterm_during_training_records_the_run_as_stopped_not_running(tmp_path, python, root):
    """`kill <pid>` (SIGTERM, what schedulers send) left grpo_ext_run.json saying `running`: now `failed`, with the
    step reached, and the exit code still says a signal ended it."""
    import os
    import signal
    import subprocess
    import time

    out = tmp_path / "run"
    argv = [python, "scripts/train.py", *FAST, "--max_steps", "500", "--output_dir", str(out)]
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while (read_run_status(out) or {}).get("status") != "running":
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-2000:]
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        proc.kill()
    status = read_run_status(out)
    assert status["status"] == "failed" and status["error"] == "stopped (exit 143, SIGTERM)", status
    assert "Traceback" not in proc.stderr.read()
