"""Two gloo processes compute the same process advantages, zero-std decisions, loss and gradient as one process, and
with skipped groups spread unevenly over processes and micro-batches both equal TRL's loss on the kept rows."""

import json
import os
import subprocess

import pytest
import torch


@pytest.mark.slow
@pytest.mark.skipif(
    torch.cuda.is_available(),
    reason="two gloo processes on the CPU (ACCELERATE_USE_CPU=1): with CUDA visible their barrier fails ('Connection "
    "closed by peer', measured on an H100); the equality checked here is the CPU path's, run on CPU machines",
)
def test_two_processes_equal_one(python, root, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(root), "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
    script = str(root / "tests/dist/check_equal.py")
    torchrun = [python, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29533"]
    for cmd in ([python, script, str(tmp_path)], [*torchrun, script, str(tmp_path)]):
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]

    single = json.loads((tmp_path / "rank0_of1.json").read_text())
    ranks = [json.loads((tmp_path / f"rank{r}_of2.json").read_text()) for r in range(2)]
    assert single["keep"] == [1.0] * 8 + [0.0] * 4  # group 2 has no signal and is skipped
    assert ranks[0]["keep"] + ranks[1]["keep"] == single["keep"]
    split = ranks[0]["advantages"] + ranks[1]["advantages"]
    assert len(split) == 12
    for row, (a, b) in enumerate(zip(single["advantages"], split, strict=False)):
        assert a == pytest.approx(b, abs=1e-6), f"row {row}"
    assert any(abs(x) > 0.1 for row in single["advantages"][4:8] for x in row)  # group 1, split across ranks
    assert ranks[0]["num_items_in_batch"] == ranks[1]["num_items_in_batch"] == single["num_items_in_batch"]
    # DDP averages the ranks' gradients, so the mean of the ranks' losses (and gradients) is the step's.
    assert sorted(single["reference"]) == sorted(single["losses"]) and len(single["reference"]) == 8
    for loss_type, reference in single["reference"].items():
        one = single["losses"][loss_type]
        two = [r["losses"][loss_type] for r in ranks]
        two_loss = (two[0]["loss"] + two[1]["loss"]) / 2
        two_grad = [(a + b) / 2 for a, b in zip(two[0]["grad"], two[1]["grad"], strict=True)]
        scale = max(abs(g) for g in reference["grad"])  # float32 sums over ~1 M weights: tolerance on this scale
        for name, loss, grad in (("1 process", one["loss"], one["grad"]), ("2 processes", two_loss, two_grad)):
            assert loss == pytest.approx(reference["loss"], rel=1e-4, abs=1e-6), f"{loss_type}, {name}"
            assert grad == pytest.approx(reference["grad"], abs=1e-4 * scale), f"{loss_type}, {name}"
        assert any(abs(g) > 1e-3 for g in reference["grad"]), loss_type  # a real gradient, not 0 == 0


@pytest.mark.slow
def test_train_script_runs_every_extension_on_two_processes(python, root, tmp_path):
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
    cmd = [
        python, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29534",
        "scripts/train.py", "--config", "configs/process.yaml", "--output_dir", str(tmp_path),
        "--max_steps", "2", "--per_device_train_batch_size", "8", "--num_generations", "4",
        "--max_completion_length", "24", "--train_size", "64", "--zero_std_groups", "refill",
        "--max_refill_rounds", "1", "--kl_controller", "adaptive", "--beta", "0.05", "--logging_steps", "1",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "'beta'" in proc.stdout + proc.stderr and "zero_std/refill_rounds" in proc.stdout + proc.stderr
    assert (tmp_path / "model.safetensors").is_file()
