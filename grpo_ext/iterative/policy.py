"""The policy step of an iteration: GRPO against the current reward model, the reference reset to the policy."""

from __future__ import annotations

import copy

from grpo_ext.advantages import get_gradient_coefficient
from grpo_ext.rewards.orm import RMRewardFunction
from grpo_ext.rewards.prm import PRMOutcomeReward, ProcessRewardModel

__all__ = ["PROCESS_SUPERVISION", "build_policy_trainer", "reference_matches_policy", "training_reward_summary"]

# The gradient coefficient a PRM's step scores feed when the configured one reads no step rewards
# (DeepSeekMath 4.1.3, process supervision).
PROCESS_SUPERVISION = "process"


def build_policy_trainer(
    policy_dir,
    reward_model_dir,
    reward_model_type: str,
    task,
    train_dataset,
    training_args,
    output_dir,
    *,
    log_verifier_reward: bool = True,
    seed: int | None = None,
):
    """A GRPOExtTrainer for one iteration: the policy *and* its reference start from ``policy_dir`` (the reset:
    TRL rebuilds the reference from ``model.config._name_or_path``); the reward is the RM in
    ``reward_model_dir`` (outcome: :class:`RMRewardFunction`; process: the PRM's step scores, with its minimum
    step score logged as the outcome reward). ``training_args`` is copied, never changed."""
    from grpo_ext.assembly import build_grpo_trainer

    args = copy.deepcopy(training_args)
    args.output_dir = str(output_dir)
    if seed is not None:
        args.seed = seed
    args.save_strategy = "no"
    process_reward_funcs = None  # the config's, as in any GRPO run
    if reward_model_type == "outcome":
        reward_funcs = [RMRewardFunction(reward_model_dir, name="orm")]
    else:
        args.step_separator = args.step_separator or task.step_separator
        if not get_gradient_coefficient(args.advantage_mode).needs_step_rewards:
            args.advantage_mode = PROCESS_SUPERVISION
        prm = ProcessRewardModel(str(reward_model_dir), args.step_separator)
        process_reward_funcs = [prm]
        reward_funcs = [PRMOutcomeReward(prm)]
    if log_verifier_reward:
        reward_funcs.append(task.outcome_reward)  # logged as rewards/outcome_reward/mean, weight 0
        args.reward_weights = [1.0] * (len(reward_funcs) - 1) + [0.0]
    else:
        args.reward_weights = None
    return build_grpo_trainer(
        task,
        args,
        model=str(policy_dir),
        reward_funcs=reward_funcs,
        process_reward_funcs=process_reward_funcs,
        train_dataset=train_dataset,
    )


def reference_matches_policy(trainer) -> bool | None:
    """True when the trainer's reference model has the policy's weights (None: no reference, beta == 0)."""
    import torch

    if trainer.ref_model is None:
        return None
    policy = dict(trainer.accelerator.unwrap_model(trainer.model).named_parameters())
    for name, ref_param in trainer.ref_model.named_parameters():
        if name not in policy or not torch.equal(policy[name].detach().cpu(), ref_param.detach().cpu()):
            return False
    return True


def training_reward_summary(log_history: list[dict], rm_metric: str) -> dict:
    """First and last logged training rewards (RM score, and the verifier's when logged)."""
    rows = [r for r in log_history if "reward" in r]
    out = {}
    for key, name in ((f"rewards/{rm_metric}/mean", "rm_reward"), ("rewards/outcome_reward/mean", "verifier_reward")):
        values = [r[key] for r in rows if key in r]
        if values:
            out[f"train_{name}_first"] = float(values[0])
            out[f"train_{name}_last"] = float(values[-1])
    return out
