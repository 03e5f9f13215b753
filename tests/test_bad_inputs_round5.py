"""Issue 52 (the fifth round), the cases after data loss and security: tracebacks that are now one line naming the
field or file (exit 2), Ctrl-C as "stopped" (exit 130), and silent acceptances now refused or documented. Each goes
through the entry point the user runs (`run_cli` with the script's `main`, or the script itself)."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scripts import train
from tests.bad_inputs import CONFIG, check_one_line

TINY = ["--max_steps", "1", "--per_device_train_batch_size", "4", "--num_generations", "2"]
TINY += ["--max_completion_length", "8", "--train_size", "8", "--disable_tqdm", "true"]


def run_train(*flags, config=None):
    def trigger(tmp):
        return train.main([*(config or CONFIG), "--output_dir", str(tmp / "out"), *TINY, *flags])

    return trigger


def default_config_with(tmp, lines: str) -> list[str]:
    """configs/default.yaml without its reward_funcs line, plus `lines`."""
    text = "".join(
        line for line in Path(CONFIG[1]).read_text().splitlines(keepends=True) if not line.startswith("reward_funcs")
    )
    path = tmp / "config.yaml"
    path.write_text(text + lines)
    return ["--config", str(path)]


# ---- tracebacks -> one line ----------------------------------------------------------------------------------------


def test_a_reward_function_that_is_a_number_is_named(tmp_path, capsys):
    config = default_config_with(tmp_path, "reward_funcs: [1]\n")
    check_one_line(run_train(config=config), r"reward_funcs: 1 is not a reward function name", tmp_path, capsys)


def test_more_reward_weights_than_reward_functions_is_named(tmp_path, capsys):
    trigger = run_train("--reward_weights", "1.0", "2.0")
    check_one_line(trigger, r"reward_weights: 2 weights \[1\.0, 2\.0\] for 1 reward_funcs", tmp_path, capsys)


def test_a_diverging_learning_rate_stops_the_run_at_its_step(tmp_path, capsys):
    """lr 1e300: the weights are inf after the first optimizer step; TRL's sampling then failed with a traceback, the
    sampler backend went on and saved NaN weights as `complete`. Both stop at step 1, the run recorded `failed`."""
    for backend in ("trl", "sampler"):
        out = tmp_path / backend
        out.mkdir()
        trigger = run_train("--learning_rate", "1e300", "--warmup_steps", "0", "--generation_backend", backend)
        message = r"training diverged at step 1: \S+ holds (NaN|inf)( and inf)? after the optimizer step "
        message += r"\(learning_rate 1e\+300\)"
        check_one_line(trigger, message, out, capsys)
        record = json.loads((out / "out" / "grpo_ext_run.json").read_text())
        assert record["status"] == "failed" and record["step"] == 1
        assert not (out / "out" / "model.safetensors").exists()


def test_ctrl_c_during_training_says_stopped_and_exits_130(python, root, tmp_path):
    out = tmp_path / "out"
    flags = [*CONFIG, "--output_dir", str(out), *TINY[2:], "--max_steps", "500", "--save_strategy", "no"]
    proc = subprocess.Popen(
        [python, "scripts/train.py", *flags], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    record = out / "grpo_ext_run.json"
    deadline = time.time() + 300
    while not record.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # into the steps
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "stopped (Ctrl-C)", err[-2000:]
    status = json.loads(record.read_text())
    assert status["status"] == "failed" and status["error"] == "stopped (KeyboardInterrupt)"


# ---- silent -> accepted as it should be -----------------------------------------------------------------------------


def test_a_partial_of_the_users_own_reward_function_is_accepted(tmp_path, monkeypatch):
    """`functools.partial(score, scale=0.5)` in the user's module is the user's function (it was refused as "part of
    Python itself", the partial's class living in functools); a partial of a standard-library function still is not."""
    (tmp_path / "my_rewards.py").write_text(
        "import functools, os\n\n"
        "def score(prompts, completions, scale=1.0, **kwargs):\n"
        "    return [scale * ('#' in c) for c in completions]\n\n"
        "half = functools.partial(score, scale=0.5)\n"
        "system = functools.partial(os.system)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    config = default_config_with(tmp_path, "reward_funcs: [my_rewards.half]\n")
    run_train(config=config)(tmp_path)
    assert json.loads((tmp_path / "out" / "grpo_ext_run.json").read_text())["status"] == "complete"

    from grpo_ext.errors import UserError
    from grpo_ext.rewards import load_callable

    with pytest.raises(UserError, match=r"part of Python itself \((os|posix|nt)\)"):
        load_callable("my_rewards.system", "reward_funcs")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
