"""Runners: one thin function per method over a TRL trainer, all from the same base and train prompts.

    python -m grpo_ext.methods --config configs/methods/rft.yaml [--seed 1 --output_dir ... ]

- ``sft``: ``SFTTrainer`` on the task's reference solutions (``prompt`` / ``completion`` = ``solution``).
- ``rft``: ``samples_per_prompt`` completions per train prompt drawn once from the base model, the correct ones
  kept and deduplicated, then ``SFTTrainer`` on them.
- ``dpo``: the same draw; per prompt up to ``dpo_pairs_per_prompt`` (correct, incorrect) pairs; ``DPOTrainer``.
- ``online`` (online RFT, GRPO outcome, GRPO process): ``GRPOExtTrainer`` from the one factory,
  :func:`grpo_ext.assembly.build_grpo_trainer`, with the method's ``advantage_mode`` (checked against the config).

Every run writes, next to the saved model: ``training_cost.json`` (:mod:`grpo_ext.methods.cost`),
``learning_curve.json`` when ``curve_every > 0`` (pass@1 on held-out prompts against training samples), and
``method_run.json`` (the method, its paradigm description and the resolved config).
"""

from __future__ import annotations

import dataclasses
import gc
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_ext.methods.config import check_budget, parse_method_args, trained_sequences_per_step
from grpo_ext.methods.cost import (
    COST_FILE,
    CURVE_FILE,
    LOG_FILE,
    RUN_FILE,
    CountingReward,
    SampleBudget,
    TrainTimer,
    trained_tokens,
    write_json_file,
)
from grpo_ext.methods.curve import add_learning_curve
from grpo_ext.methods.draws import (
    as_completion,
    cut_at_stop,
    distinct_prompts,
    dpo_pairs,
    draw_from_base,
    rft_examples,
)
from grpo_ext.methods.paradigm import Method, get_method

logger = logging.getLogger(__name__)

__all__ = [
    "RUNNERS",
    "NoTrainingData",
    "as_completion",
    "cut_at_stop",
    "dpo_pairs",
    "draw_from_base",
    "rft_examples",
    "run_method",
    "train_method",
]


class NoTrainingData(ValueError):
    """The method's data holds no example: RFT without a correct sample, DPO without a (correct, incorrect) pair. Its
    gradient coefficient is 0 on every sample, so the paradigm's update is none: the run's model is the base, saved as
    it is (:func:`train_method`), and its record says why. (A weak base on a small draw can get there; so does the
    study's ``--quick`` rehearsal on a random model.)"""


@dataclass
class RunContext:
    """Everything a runner needs: the parsed config, the task and its train prompts."""

    method: Method
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
        runners (the online one hands ``model_args`` to ``build_grpo_trainer``, which resolves them itself)."""
        if self._policy is None:
            from grpo_ext.errors import check_tokenizer, check_weights
            from grpo_ext.modeling import policy_init

            self._policy = policy_init(self.model_args, self.training_args)
            check_weights(self._policy[0], "model_name_or_path")  # local folders only: a torn file named
            check_tokenizer(self._policy[0], "model_name_or_path")
        return self._policy


# ------------------------------------------------------------------------------------------------------------
# runners: each builds its TRL trainer and returns it (train() is called by train_method)


def _tokenizer(ctx: RunContext):
    from transformers import AutoTokenizer

    model_id, _, _ = ctx.policy()
    tokenizer = AutoTokenizer.from_pretrained(model_id, trust_remote_code=ctx.training_args.trust_remote_code)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _sft_trainer(ctx: RunContext, prompts: list, completions: list[str]):
    from datasets import Dataset
    from trl import SFTTrainer

    if not prompts:
        raise NoTrainingData(f"method {ctx.method.name!r}: no training examples (nothing to fine-tune on)")
    completions = [as_completion(p, c) for p, c in zip(prompts, completions, strict=True)]
    dataset = Dataset.from_list([{"prompt": p, "completion": c} for p, c in zip(prompts, completions, strict=True)])
    model_id, quantization_config, peft_config = ctx.policy()
    return SFTTrainer(
        model=model_id,
        args=ctx.training_args,
        train_dataset=dataset,
        processing_class=_tokenizer(ctx),
        quantization_config=quantization_config,
        peft_config=peft_config,
    )


def run_sft(ctx: RunContext):
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


def run_rft(ctx: RunContext):
    """Rejection-sampling fine-tuning: correct samples of the base model, deduplicated, then SFT."""
    prompts, answers, samples = draw_from_base(ctx)
    kept_prompts, kept_completions, n_correct = rft_examples(ctx.task, prompts, answers, samples)
    ctx.details.update(
        correct_samples=n_correct,
        unique_correct=len(kept_completions),
        prompts_with_a_correct_sample=distinct_prompts(kept_prompts),
        prompts=len(prompts),
    )
    return _sft_trainer(ctx, kept_prompts, kept_completions)


def run_dpo(ctx: RunContext):
    """DPO on (correct, incorrect) pairs sampled once from the base model; the reference is the base."""
    from datasets import Dataset
    from trl import DPOTrainer

    prompts, answers, samples = draw_from_base(ctx)
    pairs = dpo_pairs(ctx.task, prompts, answers, samples, ctx.method_args.dpo_pairs_per_prompt, ctx.training_args.seed)
    ctx.details.update(
        pairs=len(pairs), prompts_with_pairs=distinct_prompts(p["prompt"] for p in pairs), prompts=len(prompts)
    )
    if not pairs:
        raise NoTrainingData("method 'dpo': no prompt has both a correct and an incorrect sample; no pairs to train on")
    dataset = Dataset.from_list(pairs)
    model_id, quantization_config, peft_config = ctx.policy()
    return DPOTrainer(
        model=model_id,
        args=ctx.training_args,
        train_dataset=dataset,
        processing_class=_tokenizer(ctx),
        quantization_config=quantization_config,
        peft_config=peft_config,
    )


def run_online(ctx: RunContext):
    """Online RFT / GRPO: ``GRPOExtTrainer`` from ``build_grpo_trainer``, the method's gradient coefficient.

    The outcome rewards are wrapped in counters: what they score is what the policy generated to train.
    """
    from grpo_ext.assembly import build_grpo_trainer
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
    )


RUNNERS = {"sft": run_sft, "rft": run_rft, "dpo": run_dpo, "online": run_online}


# ------------------------------------------------------------------------------------------------------------


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, str | int | float | bool) or obj is None:
        return obj
    return str(obj)


def train_method(method_args, task_args, training_args, model_args) -> dict:
    """Train one method from parsed arguments; returns the cost record (also written to the output folder)."""
    from grpo_ext.tasks import get_task
    from grpo_ext.tasks.base import require_prompt_column

    method = get_method(method_args.method)
    if method.online and training_args.advantage_mode != method.advantage_mode:
        raise ValueError(
            f"advantage_mode: method {method.name!r} trains with `{method.advantage_mode}`, the config says "
            f"`{training_args.advantage_mode}`"
        )
    budget = check_budget(method.name, method_args, task_args, training_args)
    task = get_task(task_args.task, **task_args.task_kwargs)
    train_dataset = require_prompt_column(task.load("train", task_args.train_size), f"task {task.name!r}")
    ctx = RunContext(method, method_args, task_args, training_args, model_args, task, train_dataset)
    logger.info("method %s: %s", method.name, method.title)

    try:
        trainer = RUNNERS[method.runner](ctx)
    except NoTrainingData as err:
        return _save_untrained(ctx, str(err), budget)
    timer = TrainTimer()
    trainer.add_callback(timer)
    counters = ctx.details.pop("counters", None)
    if counters and budget:  # refills generate more a step: the budget, not max_steps, ends such a run
        trainer.add_callback(SampleBudget(counters[0], budget, trained_sequences_per_step(method.name, training_args)))
    curve = add_learning_curve(
        trainer,
        task,
        method.name,
        method_args,
        training_args,
        generated=(lambda: counters[0].samples) if counters else (lambda: ctx.cost.get("samples_generated", 0)),
    )
    from grpo_ext.hub.training import training_run

    # the run's record (status, resolved config), as every runner writes it
    with training_run(trainer, task_args, model_args):
        trainer.train()
        if hasattr(trainer, "check_rewards_were_scored"):  # GRPO-family: no reward ever scored fails the run
            trainer.check_rewards_were_scored()
        out = Path(training_args.output_dir)
        trainer.save_model(str(out))
        if counters:  # online: what the reward function scored is what was generated
            ctx.cost.update(samples_generated=counters[0].samples, generated_tokens=counters[0].tokens)
        curve_seconds = curve.seconds if curve is not None else 0.0
        train_seconds = timer.seconds - curve_seconds
        cost = {
            "method": method.name,
            "seed": training_args.seed,
            "sample_budget": budget,
            "samples_generated": int(ctx.cost.get("samples_generated", 0)),
            "generated_tokens": int(ctx.cost.get("generated_tokens", 0)),
            "optimizer_steps": timer.steps,
            "trained_sequences": timer.steps * trained_sequences_per_step(method.name, training_args),
            "trained_tokens": trained_tokens(trainer),
            "sampling_seconds": round(ctx.cost.get("sampling_seconds", 0.0), 2),
            "train_seconds": round(train_seconds, 2),
            "curve_seconds": round(curve_seconds, 2),
            "wall_seconds": round(ctx.cost.get("sampling_seconds", 0.0) + train_seconds, 2),
            "details": ctx.details,
        }
        if trainer.accelerator.is_main_process:
            trainer.processing_class.save_pretrained(str(out))
            write_json_file(out, COST_FILE, cost)
            if curve is not None:
                write_json_file(
                    out,
                    CURVE_FILE,
                    {
                        "method": method.name,
                        "seed": training_args.seed,
                        "params": curve.params.to_dict(),
                        "points": curve.points(),
                    },
                )
            # what the report's diagnostics read (e.g. the share of groups without signal), kept with the run's records
            write_json_file(out, LOG_FILE, _jsonable(trainer.state.log_history))
            write_json_file(
                out,
                RUN_FILE,
                _jsonable(
                    {
                        "method": dataclasses.asdict(method),
                        "method_args": dataclasses.asdict(method_args),
                        "task": dataclasses.asdict(task_args),
                        "training": training_args.to_dict(),
                        "model": dataclasses.asdict(model_args),
                    }
                ),
            )
    del trainer
    gc.collect()
    return cost


def _save_untrained(ctx: RunContext, why: str, budget: int) -> dict:
    """The run of a method whose data is empty (:class:`NoTrainingData`): its model is the base, unchanged (a fresh
    LoRA adapter, whose B is zero, when the config trains one), with the cost record of what was drawn."""
    from transformers import AutoModelForCausalLM

    logger.warning("%s: GC 0 on every sample, no update; the run's model is the base", why)
    out = Path(ctx.training_args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    model_id, quantization_config, peft_config = ctx.policy()
    model = AutoModelForCausalLM.from_pretrained(model_id, dtype=ctx.model_args.dtype, use_safetensors=True)
    if peft_config is not None:
        from peft import get_peft_model

        model = get_peft_model(model, peft_config)
    model.save_pretrained(str(out))
    _tokenizer(ctx).save_pretrained(str(out))
    sampling = ctx.cost.get("sampling_seconds", 0.0)
    cost = {
        "method": ctx.method.name,
        "seed": ctx.training_args.seed,
        "sample_budget": budget,
        "samples_generated": int(ctx.cost.get("samples_generated", 0)),
        "generated_tokens": int(ctx.cost.get("generated_tokens", 0)),
        "optimizer_steps": 0,
        "trained_sequences": 0,
        "trained_tokens": 0,
        "sampling_seconds": round(sampling, 2),
        "train_seconds": 0.0,
        "curve_seconds": 0.0,
        "wall_seconds": round(sampling, 2),
        "details": {**ctx.details, "no_training_data": why},
    }
    write_json_file(out, COST_FILE, cost)
    write_json_file(out, LOG_FILE, [])
    del model
    gc.collect()
    return cost


def run_method(argv: list[str]) -> dict:
    """Parse ``--config configs/methods/<name>.yaml [--flag value ...]`` and train that method."""
    return train_method(*parse_method_args(argv))
