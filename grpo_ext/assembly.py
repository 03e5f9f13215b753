"""One trainer factory: parsed arguments and a task in, a `GRPOExtTrainer` out.

`scripts/train.py`, the unified-paradigm runners and the iterative loop all build their GRPO trainer here, so the
rules that join a task to the trainer are written once:

- the step separator defaults to the task's (`;` for the embedded task), else the trainer's newline;
- reward sources may be names (`outcome`: the task's verifier, `step`: its step verifier, else a dotted import
  path) or callables;
- the policy comes from `ModelConfig` the TRL way (`policy_init`: a path, 4-bit quantisation, LoRA; `cpu_bf16`), unless
  a model (a path or a module) is given;
- on a CPU, TRL's fused LM head scores only the completion positions, as it does on a GPU
  (`grpo_ext.policy_loading.compact_log_probs_on_cpu`: the same log-probs, a third less step time on the real model).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from grpo_ext.batching import get_zero_std_strategy, prompts_drawn, refill_reserve
from grpo_ext.model_files import check_not_adapter, check_tokenizer
from grpo_ext.rewards import resolve_process_reward_funcs, resolve_reward_funcs
from grpo_ext.script_args import TaskFields
from grpo_ext.tasks.base import Task, require_prompt_column

RewardSource = str | Callable
logger = logging.getLogger(__name__)


def build_grpo_trainer(
    task: Task,
    training_args,
    *,
    model_args=None,
    model=None,
    reward_funcs: Sequence[RewardSource] = ("outcome",),
    process_reward_funcs: Sequence[RewardSource] | None = None,
    train_dataset=None,
    train_size: int | None = None,
    train_offset: int = 0,
    **trainer_kwargs,
):
    """A `GRPOExtTrainer` for `task`.

    Args:
        task: supplies the training prompts (when `train_dataset` is None), the verifiers named by `outcome`
            and `step`, and the default step separator.
        training_args: a `GRPOExtConfig`; its `step_separator` is filled in from the task when unset.
        model_args: TRL's `ModelConfig`, turned into (path, quantization_config, peft_config); or
        model: a path or a model, used as is (then `model_args` is ignored).
        reward_funcs / process_reward_funcs: names or callables; `process_reward_funcs=None` reads
            `training_args.process_reward_funcs`.
        train_dataset / train_size / train_offset: the prompts; by default `train_size` of the task's train prompts
            after its first `train_offset`; a warning when a run of `max_steps` draws more prompts than it holds
            (`batching.prompts_drawn`: some come twice). With a `zero_std_groups` strategy that draws prompts of its
            own (`refill`) and the task's prompts, its rounds draw the task's train prompts after them.
        trainer_kwargs: passed to `GRPOExtTrainer` (callbacks, processing_class, ...).
    """
    from grpo_ext.trainer import GRPOExtTrainer

    if (model is None) == (model_args is None):
        raise TypeError("build_grpo_trainer: give exactly one of model_args and model")
    if training_args.step_separator is None and task.step_separator is not None:
        training_args.step_separator = task.step_separator
    if train_dataset is None:
        train_dataset = TaskFields(train_size=train_size, train_offset=train_offset).train_prompts(task)
        if (
            get_zero_std_strategy(training_args.zero_std_groups).draws_prompts
            and "refill_dataset" not in trainer_kwargs
        ):
            # refill rounds draw the task's train prompts after the run's own: no prompt is trained on twice
            trainer_kwargs["refill_dataset"] = refill_reserve(task, train_offset + len(train_dataset), training_args)
    train_dataset = require_prompt_column(train_dataset, f"task {task.name!r}")
    drawn = prompts_drawn(training_args)
    if drawn is not None and hasattr(train_dataset, "__len__") and len(train_dataset) < drawn:
        logger.warning(
            "train_size: the run draws %d prompts but the dataset holds %d: prompts will be trained on more than once",
            drawn,
            len(train_dataset),
        )
    from grpo_ext.policy_loading import compact_log_probs_on_cpu

    compact_log_probs_on_cpu()  # only CPU tensors are affected; a GPU run scores compactly already
    quantization_config = peft_config = None
    if model is None:
        from grpo_ext.policy_loading import policy_init

        model, quantization_config, peft_config = policy_init(model_args, training_args)
    if isinstance(model, str):
        check_not_adapter(model, "model_name_or_path")
    if isinstance(model, str) and "processing_class" not in trainer_kwargs:
        check_tokenizer(model, "model_name_or_path")  # TRL loads it from the model folder: one line, not its traceback
    if process_reward_funcs is None:
        process_reward_funcs = training_args.process_reward_funcs
    return GRPOExtTrainer(
        model=model,
        reward_funcs=resolve_reward_funcs(reward_funcs, task),
        process_reward_funcs=resolve_process_reward_funcs(process_reward_funcs, task),
        args=training_args,
        train_dataset=train_dataset,
        quantization_config=quantization_config,
        peft_config=peft_config,
        **trainer_kwargs,
    )
