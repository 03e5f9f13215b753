"""The harness's metrics logged during GRPO training (grpo_ext.evaluation.callback)."""

from grpo_ext.tasks import get_task
from tests.trainer_utils import tiny_args


def test_callback_logs_pass_and_maj_at_k_during_grpo_training(tmp_path):
    from trl import GRPOConfig, GRPOTrainer

    from grpo_ext.evaluation.callback import make_passk_callback
    from grpo_ext.model_paths import resolve_model_path

    task = get_task("arithmetic")
    config = tiny_args(  # TRL's own config and trainer: the callback needs nothing of ours
        GRPOConfig, tmp_path, per_device_train_batch_size=4, max_completion_length=16, learning_rate=1e-5
    )
    trainer = GRPOTrainer(
        model=resolve_model_path("embedded"),
        reward_funcs=task.outcome_reward,
        args=config,
        train_dataset=task.load("train", 16),
    )
    callback = make_passk_callback(task, n_prompts=4, n=4, ks=(1, 4, 8), every=1, trainer=trainer)
    assert callback.ks == [1, 4]  # 8 > n: dropped with a warning
    assert callback.params.max_new_tokens == 16  # the trainer's max_completion_length
    trainer.train()
    evals = [entry for entry in trainer.state.log_history if "eval/pass@1" in entry]
    assert [entry["step"] for entry in evals] == [1, 2]
    for entry in evals:
        assert 0.0 <= entry["eval/pass@1"] <= entry["eval/pass@4"] <= 1.0 and "eval/maj@4" in entry
        assert "reward" not in entry  # TRL's training metrics stay in their own entries
    assert sum("reward" in entry for entry in trainer.state.log_history) == 2
    assert trainer.model.training  # put back in training mode after each evaluation
