"""A training run's record (grpo_ext_run.json) keeps the trainer's log history, rounded, so a committed record is
enough to plot the learning curve: complete runs, failed runs, and a run's checkpoints along the way."""

from __future__ import annotations

import json

import numpy as np
import pytest

from grpo_ext.checkpoints import RUN_STATUS_FILE, read_run_status
from grpo_ext.errors import UserError
from grpo_ext.run_record import compact_log_history
from scripts import train
from tests.trainer_utils import TRAIN_ARGV

FAST = TRAIN_ARGV


def test_floats_are_rounded_counts_kept_exact_and_nan_is_null():
    history = [
        {"loss": 0.123456789, "reward": 0.59375, "kl": 1.23456e-05, "learning_rate": 4.99999e-05, "step": 3},
        {"num_tokens": 2048.0, "epoch": 0.0625, "grad_norm": float("nan"), "reward_std": np.float32(0.25), "step": 4},
        {"train_runtime": 12.3456, "total_flos": 123456789.0, "note": "x", "clipped": True, "step": 4},
    ]
    assert compact_log_history(history) == [
        {"loss": 0.1235, "reward": 0.5938, "kl": 1.235e-05, "learning_rate": 5e-05, "step": 3},
        {"num_tokens": 2048.0, "epoch": 0.0625, "grad_norm": None, "reward_std": 0.25, "step": 4},
        {"train_runtime": 12.35, "total_flos": 123456789.0, "note": "x", "clipped": True, "step": 4},
    ]
    json.dumps(compact_log_history(history), allow_nan=False)  # strict JSON: any reader can load it


def test_a_finished_run_keeps_every_logged_step(tmp_path):
    out = tmp_path / "run"
    train.main([*FAST, "--max_steps", "2", "--beta", "0.04", "--output_dir", str(out)])
    record = read_run_status(out)
    assert record["status"] == "complete" and record["global_step"] == 2
    steps = [entry for entry in record["log_history"] if "loss" in entry]
    assert [entry["step"] for entry in steps] == [1, 2]
    for key in ("reward", "reward_std", "frac_reward_zero_std", "completions/mean_length", "kl"):
        assert all(key in entry for entry in steps), key
    assert not any("beta" in entry for entry in steps)  # a fixed beta is not logged (TRL logs none)
    # the same history as transformers' own trainer_state.json, rounded
    state = json.loads((out / "trainer_state.json").read_text())
    assert record["log_history"] == compact_log_history(state["log_history"])
    assert "train_runtime" in record["log_history"][-1]  # the run's closing summary too


CALLS = {"n": 0, "seen": None}


def fail_on_step_two(completions, **kwargs):
    """A reward that records what the run record says when step 2 starts, then fails (a crash mid-run)."""
    CALLS["n"] += 1
    if CALLS["n"] == 2:
        CALLS["seen"] = json.loads(CALLS["path"].read_text())
        raise RuntimeError("reward server down")
    return [float(i % 2) for i in range(len(completions))]


def test_a_failed_run_keeps_its_history_and_each_checkpoint_rewrites_it(tmp_path):
    out = tmp_path / "run"
    CALLS.update(n=0, seen=None, path=out / RUN_STATUS_FILE)
    argv = [*FAST, "--max_steps", "3", "--output_dir", str(out), "--save_strategy", "steps", "--save_steps", "1"]
    with pytest.raises((RuntimeError, UserError), match="reward server down"):
        train.main([*argv, "--reward_funcs", "tests.test_run_log_history.fail_on_step_two"])
    # written when checkpoint-1 was saved, before step 2 began
    assert CALLS["seen"]["status"] == "running" and CALLS["seen"]["step"] == 1
    assert [e["step"] for e in CALLS["seen"]["log_history"]] == [1] and "reward" in CALLS["seen"]["log_history"][0]
    record = json.loads((out / RUN_STATUS_FILE).read_text())
    assert record["status"] == "failed" and "reward server down" in record["error"]
    assert [e["step"] for e in record["log_history"]] == [1]
