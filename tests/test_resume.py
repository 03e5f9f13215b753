"""A run killed with SIGKILL between checkpoints resumes to the same weights, beta and refill bookkeeping."""

import json
import signal
import subprocess
import time

import pytest
from safetensors.torch import load_file

RUN = [
    "scripts/train.py",
    "--config",
    "configs/default.yaml",
    "--max_steps",
    "4",
    "--save_strategy",
    "steps",
    "--save_steps",
    "2",
    "--per_device_train_batch_size",
    "8",
    "--num_generations",
    "4",
    "--max_completion_length",
    "24",
    "--train_size",
    "64",
    "--logging_steps",
    "1",
    "--learning_rate",
    "1e-3",
    "--kl_controller",
    "adaptive",
    "--beta",
    "0.05",
    "--target_kl",
    "0.001",
    "--kl_horizon",
    "50",
    "--zero_std_groups",
    "refill",
    "--max_refill_rounds",
    "1",
    "--disable_tqdm",
    "true",
]


def command(python, out, *extra):
    model = "embedded"
    return [python, *RUN, "--model_name_or_path", model, "--output_dir", str(out), *extra]


@pytest.mark.slow
def test_sigkill_then_resume_equals_an_uninterrupted_run(python, root, tmp_path):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    subprocess.run(command(python, straight), cwd=root, check=True, capture_output=True, timeout=600)

    proc = subprocess.Popen(command(python, killed), cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    marker = killed / "checkpoint-2" / "grpo_ext_state.json"
    deadline = time.time() + 600
    while not marker.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL  # really killed, not finished
    assert not (killed / "checkpoint-4").exists()

    subprocess.run(
        command(python, killed, "--resume_from_checkpoint", str(killed / "checkpoint-2")),
        cwd=root,
        check=True,
        capture_output=True,
        timeout=600,
    )
    state_a = json.loads((straight / "checkpoint-4" / "grpo_ext_state.json").read_text())
    state_b = json.loads((killed / "checkpoint-4" / "grpo_ext_state.json").read_text())
    assert state_a == state_b
    assert state_a["kl_controller"]["beta"] != 0.05  # beta moved, so equality is not trivial
    assert state_a["refill_draws"] == state_b["refill_draws"]
    weights_a = load_file(straight / "model.safetensors")
    weights_b = load_file(killed / "model.safetensors")
    assert weights_a.keys() == weights_b.keys()
    for name in weights_a:
        assert (weights_a[name] == weights_b[name]).all(), name
