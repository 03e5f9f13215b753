"""Each method's TRL trainer, built from a :class:`RunContext`: the ``build`` and ``config_class`` of the paradigm's
entries (:mod:`grpo_ext.methods.paradigm`), which :func:`grpo_ext.methods.runners.train_method` trains.

- ``build_sft``: ``SFTTrainer`` on the task's reference solutions (``prompt`` / ``completion`` = ``solution``).
- ``build_rft``: ``samples_per_prompt`` completions per train prompt drawn once from the base model, the correct ones
  kept and deduplicated, then ``SFTTrainer`` on them.
- ``build_dpo``: the same draw; per prompt up to ``dpo_pairs_per_prompt`` (correct, incorrect) pairs; ``DPOTrainer``.
- ``build_online`` (online RFT, GRPO outcome, GRPO process): ``GRPOExtTrainer`` from the one factory,
  :func:`grpo_ext.assembly.build_grpo_trainer`, with the method's ``advantage_mode`` (checked against the config).

Nothing heavy is imported with this module (the paradigm table imports it and needs no trainer): TRL, datasets and
the sampler are imported when a trainer is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "NoTrainingData",
    "RunContext",
    "build_dpo",
    "build_online",
    "build_rft",
    "build_sft",
    "dpo_config",
    "grpo_config",
    "sft_config",
]


class NoTrainingData(ValueError):
    """The method's data holds no example: RFT without a correct sample, DPO without a (correct, incorrect) pair. Its
    gradient coefficient is 0 on every sample, so the paradigm's update is none: the run's model is the base, saved as
    it is (:func:`grpo_ext.methods.runners.train_method`), and its record says why. (A weak base on a small draw can
    get there; so does the study's ``--quick`` rehearsal on a random model.)"""


@dataclass
class RunContext:
    """Everything a trainer builder needs: the parsed config, the task and its train prompts."""

    method: Any  # grpo_ext.methods.paradigm.Method
    method_args: Any
    task_args: Any
    training_args: Any
    model_args: Any
    task: Any
    train_dataset: Any
    cost: dict = field(default_factory=dict)
    details: dict = field(default_factory=dict)
    _policy: tuple | None = field(default=None, init=False, repr=False)

    def policy(self) -> tuple[str, Any, Any]:
        """``(model path, quantization_config, peft_config)`` from ``model_args``, the TRL way, for the offline
        builders (the online one hands ``model_args`` to ``build_grpo_trainer``, which resolves them itself)."""
        if self._policy is None:
            from grpo_ext.model_files import check_tokenizer, check_weights
            from grpo_ext.policy_loading import policy_init

            self._policy = policy_init(self.model_args, self.training_args)
            check_weights(self._policy[0], "model_name_or_path")  # local folders only: a torn file named
            check_tokenizer(self._policy[0], "model_name_or_path")
        return self._policy

    def tokenizer(self):
        """The policy's tokenizer, padded with EOS when it has no pad token."""
        from transformers import AutoTokenizer

        model_id, _, _ = self.policy()
        tokenizer = AutoTokenizer.from_pretrained(model_id, trust_remote_code=self.training_args.trust_remote_code)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        return tokenizer


# ---- the config classes -----------------------------------------------------------------------------------------


def sft_config() -> type:
    from trl import SFTConfig

    return SFTConfig


def dpo_config() -> type:
    from trl import DPOConfig

    return DPOConfig


def grpo_config() -> type:
    from grpo_ext.config import GRPOExtConfig

    return GRPOExtConfig


# ---- the trainers -------------------------------------------------------------------------------------------------


def _offline_trainer(ctx: RunContext, trainer_class, dataset):
    """A TRL trainer of the offline methods (SFT, DPO) on `dataset`, with the policy as TRL loads it."""
    from grpo_ext.policy_loading import compact_log_probs_on_cpu

    # SFT's and DPO's losses go through TRL's fused LM head too: on a CPU it projects the prompt's positions as well
    # unless compacted (what GRPO's assembly does); measured in the SFT study's more_sft run, the head's forward and
    # backward were ~29% of a step's CPU time with ~80% of its positions prompt
    compact_log_probs_on_cpu()
    model_id, quantization_config, peft_config = ctx.policy()
    return trainer_class(
        model=model_id,
        args=ctx.training_args,
        train_dataset=dataset,
        processing_class=ctx.tokenizer(),
        quantization_config=quantization_config,
        peft_config=peft_config,
    )


def _sft_trainer(ctx: RunContext, prompts: list, completions: list[str]):
    from datasets import Dataset
    from trl import SFTTrainer

    from grpo_ext.methods.draws import as_completion

    if not prompts:
        raise NoTrainingData(f"method {ctx.method.name!r}: no training examples (nothing to fine-tune on)")
    completions = [as_completion(p, c) for p, c in zip(prompts, completions, strict=True)]
    dataset = Dataset.from_list([{"prompt": p, "completion": c} for p, c in zip(prompts, completions, strict=True)])
    return _offline_trainer(ctx, SFTTrainer, dataset)


def build_sft(ctx: RunContext):
    """SFT on the task's reference solutions of the train prompts."""
    columns = ctx.train_dataset.column_names
    if "solution" not in columns:
        raise ValueError(
            f"method 'sft': task {ctx.task.name!r} has no reference solutions (no 'solution' column; "
            f"columns: {columns})"
        )
    ctx.cost.update(samples_generated=0, generated_tokens=0, sampling_seconds=0.0)
    ctx.details["examples"] = len(ctx.train_dataset)
    return _sft_trainer(ctx, list(ctx.train_dataset["prompt"]), list(ctx.train_dataset["solution"]))


def build_rft(ctx: RunContext):
    """Rejection-sampling fine-tuning: correct samples of the base model, deduplicated, then SFT."""
    from grpo_ext.methods import draws

    prompts, answers, samples = draws.draw_from_base(ctx)
    kept_prompts, kept_completions, n_correct = draws.rft_examples(ctx.task, prompts, answers, samples)
    ctx.details.update(
        correct_samples=n_correct,
        unique_correct=len(kept_completions),
        prompts_with_a_correct_sample=draws.distinct_prompts(kept_prompts),
        prompts=len(prompts),
    )
    return _sft_trainer(ctx, kept_prompts, kept_completions)


def build_dpo(ctx: RunContext):
    """DPO on (correct, incorrect) pairs sampled once from the base model; the reference is the base."""
    from datasets import Dataset
    from trl import DPOTrainer

    from grpo_ext.methods import draws

    prompts, answers, samples = draws.draw_from_base(ctx)
    pairs = draws.dpo_pairs(
        ctx.task, prompts, answers, samples, ctx.method_args.dpo_pairs_per_prompt, ctx.training_args.seed
    )
    ctx.details.update(
        pairs=len(pairs), prompts_with_pairs=draws.distinct_prompts(p["prompt"] for p in pairs), prompts=len(prompts)
    )
    if not pairs:
        raise NoTrainingData("method 'dpo': no prompt has both a correct and an incorrect sample; no pairs to train on")
    return _offline_trainer(ctx, DPOTrainer, Dataset.from_list(pairs))


def build_online(ctx: RunContext):
    """Online RFT / GRPO: ``GRPOExtTrainer`` from ``build_grpo_trainer``, the method's gradient coefficient.

    The outcome rewards are wrapped in counters: what they score is what the policy generated to train.
    """
    from grpo_ext.assembly import build_grpo_trainer
    from grpo_ext.methods.cost import CountingReward
    from grpo_ext.rewards import resolve_reward_funcs

    counters = [CountingReward(f) for f in resolve_reward_funcs(ctx.task_args.reward_funcs, ctx.task)]
    ctx.details["counters"] = counters
    ctx.cost.update(sampling_seconds=0.0)  # generation happens inside training (in train_seconds)
    return build_grpo_trainer(
        ctx.task,
        ctx.training_args,
        model_args=ctx.model_args,
        reward_funcs=[c.fn for c in counters],
        train_size=ctx.task_args.train_size,  # ctx.train_dataset, and refill's reserve after it
        train_offset=ctx.task_args.train_offset,
    )
