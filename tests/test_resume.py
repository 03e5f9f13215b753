"""A run killed with SIGKILL between checkpoints resumes to the same weights, beta and refill bookkeeping."""

import json
import signal
import subprocess
import time

import pytest
import torch
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


# ---- in-process resumes: what the config changes, TRL's checkpoints, a save that fails -------------------------------


def _train(tmp, cls=None, resume=None, **overrides):
    from tests.trainer_utils import tiny_args, tiny_trainer

    settings = {"tmp_path": tmp, "max_steps": 1, "save_strategy": "steps", "save_steps": 1, **overrides}
    if cls is not None:
        from trl import GRPOConfig, GRPOTrainer

        trainer = tiny_trainer(GRPOTrainer, args=tiny_args(cls=GRPOConfig, **settings))
    else:
        trainer = tiny_trainer(args=tiny_args(**settings))
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def _logged(trainer, key, step):
    return [h[key] for h in trainer.state.log_history if key in h and h.get("step") == step]


@pytest.mark.parametrize("before, after", [(0.0, 0.04), (0.04, 0.0)])
def test_a_beta_changed_on_resume_is_the_one_used(tmp_path, caplog, before, after):
    """Bug 2: the config's beta wins (TRL built the reference model from it): 0 -> 0.04 gets its KL term, 0.04 -> 0
    drops it instead of crashing, and the change is logged."""
    _train(tmp_path / "a", beta=before)
    with caplog.at_level("WARNING"):
        resumed = _train(tmp_path / "b", beta=after, max_steps=2, resume=str(tmp_path / "a" / "checkpoint-1"))
    assert resumed.state.global_step == 2 and resumed.beta == after
    assert _logged(resumed, "beta", step=2) == []  # a fixed beta is not logged (as TRL); resumed.beta is the one used
    assert bool(_logged(resumed, "kl", step=2)) == (after != 0.0)
    assert f"this run uses the config's fixed beta={after}" in caplog.text


def test_adaptive_controller_resumes_its_beta_with_the_configs_hyperparameters(tmp_path, caplog):
    from tests.trainer_utils import tiny_args, tiny_trainer

    first = _train(tmp_path / "a", beta=0.1, kl_controller="adaptive", target_kl=1e-4, kl_horizon=16)
    saved = first.kl_control.state_dict()
    assert saved["beta"] != 0.1
    fresh = tiny_trainer(
        args=tiny_args(
            tmp_path=tmp_path / "b", beta=0.1, kl_controller="adaptive", target_kl=0.5, kl_horizon=100, beta_min=0.095
        )
    )
    fresh.create_optimizer_and_scheduler(num_training_steps=2)
    with caplog.at_level("WARNING"):
        fresh._load_optimizer_and_scheduler(str(tmp_path / "a" / "checkpoint-1"))
    control = fresh.kl_control
    assert (control.target_kl, control.horizon, control.beta_min) == (0.5, 100.0, 0.095)  # the config's
    assert saved["beta"] == pytest.approx(0.09)  # KL 0 at the first step: 0.1 * (1 - 0.2 * 8 / 16)
    assert control.beta == fresh.beta == 0.095  # the checkpoint's beta, clamped to the config's bounds
    assert "target_kl: the checkpoint used 0.0001; this run uses the config's 0.5" in caplog.text
    assert "kl_horizon: the checkpoint used 16.0" in caplog.text


def test_a_trl_checkpoint_resumes_with_extensions_off_as_trl_does(tmp_path):
    """A GRPOTrainer checkpoint (no grpo_ext_state.json) resumes with every extension off, to the weights TRL's own
    resume gives."""
    import torch

    _train(tmp_path / "trl", cls=True)
    checkpoint = str(tmp_path / "trl" / "checkpoint-1")
    theirs = _train(tmp_path / "trl-resumed", cls=True, max_steps=2, resume=checkpoint)
    ours = _train(tmp_path / "ext-resumed", max_steps=2, resume=checkpoint)
    assert ours.state.global_step == theirs.state.global_step == 2
    for (name, a), (_, b) in zip(theirs.model.named_parameters(), ours.model.named_parameters(), strict=True):
        assert torch.equal(a, b), name


def test_a_full_disk_during_a_checkpoint_save_leaves_the_previous_checkpoint_resumable(tmp_path, monkeypatch):
    """The second save fails half-way (after the model was written) with ENOSPC: the error names the intact
    checkpoint, nothing of the partial save is left, and the run resumes from checkpoint-1 to step 2."""
    import errno

    from transformers import Trainer
    from transformers.trainer_utils import get_last_checkpoint

    from grpo_ext.errors import UserError

    real = Trainer._save_optimizer_and_scheduler

    def fails_at_step_2(self, output_dir):
        if self.state.global_step == 2:
            raise OSError(errno.ENOSPC, "No space left on device", f"{output_dir}/optimizer.pt")
        return real(self, output_dir)

    monkeypatch.setattr(Trainer, "_save_optimizer_and_scheduler", fails_at_step_2)
    run = tmp_path / "run"
    with pytest.raises(UserError, match=r"saving checkpoint-2 .* failed \(No space left on device\).*checkpoint-1"):
        _train(run, max_steps=2)
    assert sorted(p.name for p in run.iterdir() if "checkpoint" in p.name) == ["checkpoint-1"]
    assert get_last_checkpoint(str(run)) == str(run / "checkpoint-1")
    assert (run / "checkpoint-1" / "grpo_ext_state.json").is_file()

    monkeypatch.setattr(Trainer, "_save_optimizer_and_scheduler", real)
    resumed = _train(run, max_steps=2, resume=get_last_checkpoint(str(run)))
    assert resumed.state.global_step == 2 and (run / "checkpoint-2" / "grpo_ext_state.json").is_file()


def test_the_best_checkpoint_is_recorded_where_it_ends_up(tmp_path):
    """With load_best_model_at_end, transformers records the best checkpoint while it is still staged: the recorded
    path (in the state and in trainer_state.json) is the final checkpoint folder."""
    from tests.trainer_utils import TASK, tiny_args, tiny_trainer

    args = tiny_args(
        tmp_path=tmp_path,
        max_steps=2,
        save_strategy="steps",
        save_steps=1,
        eval_strategy="steps",
        eval_steps=1,
        per_device_eval_batch_size=8,
        load_best_model_at_end=True,
        metric_for_best_model="eval_loss",
    )
    trainer = tiny_trainer(args=args, eval_dataset=TASK.load("test", 4))
    trainer.train()
    best = trainer.state.best_model_checkpoint
    assert best in (str(tmp_path / "checkpoint-1"), str(tmp_path / "checkpoint-2"))
    for step in (1, 2):
        recorded = json.loads((tmp_path / f"checkpoint-{step}" / "trainer_state.json").read_text())
        assert ".partial" not in str(recorded["best_model_checkpoint"])


def test_resuming_a_checkpoint_past_max_steps_is_refused_not_recorded_complete(tmp_path, root, monkeypatch):
    """Issue 52: a checkpoint at step 12 resumed with --max_steps 3 trained nothing and recorded the run complete."""
    import shutil

    from grpo_ext.errors import UserError
    from grpo_ext.model_paths import EMBEDDED_MODEL_DIR
    from scripts import train

    monkeypatch.chdir(root)
    run = tmp_path / "run"
    checkpoint = run / "checkpoint-12"
    shutil.copytree(EMBEDDED_MODEL_DIR, checkpoint)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 12, "log_history": []}))
    argv = ["--config", "configs/default.yaml", "--output_dir", str(run), "--resume_from_checkpoint", str(checkpoint)]
    with pytest.raises(UserError, match=r"checkpoint-12 is at step 12, past max_steps 3: resuming would train nothing"):
        train.main([*argv, "--max_steps", "3"])
    assert not (run / "grpo_ext_run.json").exists()  # no run recorded, least of all a complete one
    (checkpoint / "trainer_state.json").write_text("[]")  # a state that is not a trainer's: one line, no traceback
    with pytest.raises(UserError, match=r"trainer_state\.json is not a trainer's state \(expected a JSON object"):
        train.main([*argv, "--max_steps", "20"])


# ---- a resume past the first epoch --------------------------------------------------------------------------------

EPOCHS = [
    "scripts/train.py",
    "--config",
    "configs/default.yaml",
    "--model_name_or_path",
    "embedded",
    "--train_size",
    "8",  # 2 prompts a step (8 completions, 4 a prompt): 4 steps an epoch
    "--per_device_train_batch_size",
    "8",
    "--num_generations",
    "4",
    "--max_completion_length",
    "16",  # long enough for some right answers: a batch without signal moves no weight
    "--warmup_steps",
    "0",
    "--max_steps",
    "10",
    "--save_strategy",
    "steps",
    "--save_steps",
    "5",
    "--logging_steps",
    "1",
    "--disable_tqdm",
    "true",
]


@pytest.mark.slow
def test_a_resume_in_a_later_epoch_reproduces_the_uninterrupted_run(python, root, tmp_path):
    """Issue 52: TRL's RepeatSampler draws each epoch's prompt order from one generator seeded once, so a resumed run
    (a fresh sampler) replayed the first epoch's order in the epoch it resumed in, and the weights drifted. Resumed
    from step 5 (in epoch 2, of 4 steps an epoch) into epoch 3, the run ends on the uninterrupted weights."""
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    subprocess.run([python, *EPOCHS, "--output_dir", str(straight)], cwd=root, check=True, capture_output=True)
    checkpoint = straight / "checkpoint-5"
    subprocess.run(
        [python, *EPOCHS, "--output_dir", str(resumed), "--resume_from_checkpoint", str(checkpoint)],
        cwd=root,
        check=True,
        capture_output=True,
    )
    a, b = load_file(straight / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[name], b[name]) for name in a), "the resumed run's weights differ"
    logged = [json.loads((d / "trainer_state.json").read_text())["log_history"] for d in (straight, resumed)]
    rewards = [{h["step"]: h.get("reward") for h in log if "reward" in h} for log in logged]
    assert {s: rewards[0][s] for s in rewards[1]} == rewards[1]  # the same prompts drawn, step by step
    assert any(rewards[1].values()), "no reward after the resume: equal weights would prove nothing"
