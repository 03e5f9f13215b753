"""GRPOExtTrainer is a drop-in for TRL's GRPOTrainer (issue 40): no config or a plain `trl.GRPOConfig` trains as TRL
does (extensions at their defaults), `GRPOExtConfig` takes what `GRPOConfig` takes (top_k=None), an all-None reward
warns as TRL does rather than raising after the run, and with every extension off the logs carry TRL's keys only."""

import logging

import pytest
from trl import GRPOConfig, GRPOTrainer

from grpo_ext.config import GRPOExtConfig
from grpo_ext.errors import UserError
from grpo_ext.model_paths import EMBEDDED_MODEL_DIR
from grpo_ext.trainer import GRPOExtTrainer
from tests.trainer_utils import TASK, tiny_args, tiny_trainer


def test_no_config_builds_trls_default_config(tmp_path, monkeypatch):
    """TRL's test_init_minimal: `GRPOTrainer(model=..., reward_funcs=..., train_dataset=...)`. TRL's default config
    asks for bf16, which this CPU machine lacks (TRL's own trainer refuses it here): the check is stood in for."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("transformers.training_args.is_torch_bf16_gpu_available", lambda: True)
    built = {
        cls: cls(model=str(EMBEDDED_MODEL_DIR), reward_funcs=TASK.outcome_reward, train_dataset=TASK.load("train", 8))
        for cls in (GRPOTrainer, GRPOExtTrainer)
    }
    ours, theirs = built[GRPOExtTrainer].args, built[GRPOTrainer].args
    assert isinstance(ours, GRPOExtConfig) and ours.output_dir == theirs.output_dir == "embedded-GRPO"
    assert (ours.advantage_mode, ours.zero_std_groups, ours.kl_controller) == ("outcome", "keep", "fixed")
    assert (ours.bf16, ours.learning_rate, ours.generation_batch_size) == (
        theirs.bf16,
        theirs.learning_rate,
        theirs.generation_batch_size,
    )


def test_a_plain_grpo_config_trains_as_trl_with_the_extensions_at_their_defaults(tmp_path):
    config = tiny_args(cls=GRPOConfig, tmp_path=tmp_path / "ext", max_steps=1, top_k=None)
    trainer = tiny_trainer(args=config)
    ext = trainer.args
    assert isinstance(ext, GRPOExtConfig) and ext.generation_backend == "trl" and ext.process_reward_funcs is None
    for name in ("steps_per_generation", "generation_batch_size", "top_k", "learning_rate", "seed", "output_dir"):
        assert getattr(ext, name) == getattr(config, name), name  # as TRL resolved them, not parsed again
    trainer.train()
    reference = tiny_trainer(GRPOTrainer, args=tiny_args(cls=GRPOConfig, tmp_path=tmp_path / "trl", max_steps=1))
    reference.train()
    ours, theirs = (t.state.log_history[0] for t in (trainer, reference))
    assert set(ours) == set(theirs)  # no `beta` of a constant beta: the keys TRL logs, no others
    assert ours["loss"] == pytest.approx(theirs["loss"], abs=1e-6)


def test_top_k_none_is_accepted_as_trl_accepts_it(tmp_path):
    for cls in (GRPOConfig, GRPOExtConfig):
        assert cls(output_dir=str(tmp_path), use_cpu=True, top_k=None).top_k is None


def test_all_none_rewards_warn_in_the_python_api_and_fail_the_command_line(tmp_path, caplog):
    """TRL's test_warning_raised_all_rewards_none: `train()` warns and returns. The command lines still fail such a
    run (tests/test_run_status.py) through `check_rewards_were_scored`."""
    trainer = tiny_trainer(
        args=tiny_args(tmp_path=tmp_path, max_steps=1), reward_funcs=[lambda completions, **kw: [None] * 8]
    )
    with caplog.at_level(logging.WARNING):
        trainer.train()
    assert "All reward functions returned None" in caplog.text  # TRL's own warning
    assert "reward_funcs: no completion was scored" in caplog.text
    with pytest.raises(UserError, match="reward_funcs: no completion was scored .* in 1 steps"):
        trainer.check_rewards_were_scored()


def test_an_adaptive_beta_is_logged(tmp_path):
    args = tiny_args(tmp_path=tmp_path, max_steps=1, beta=0.1, kl_controller="adaptive")
    trainer = tiny_trainer(args=args)
    trainer.train()
    assert "beta" in trainer.state.log_history[0]
