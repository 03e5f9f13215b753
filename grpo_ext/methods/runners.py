"""Training one method of the paradigm from its config, whichever method it is.

    python -m grpo_ext.methods --config configs/methods/rft.yaml [--seed 1 --output_dir ... ]

The method's paradigm entry (:mod:`grpo_ext.methods.paradigm`) builds its TRL trainer (:mod:`grpo_ext.methods.trainers`:
SFT, RFT, DPO, or ``GRPOExtTrainer`` for the online methods); :func:`train_method` trains it under the run's record.

Every run writes, next to the saved model: ``training_cost.json`` (:mod:`grpo_ext.methods.cost`),
``learning_curve.json`` when ``curve_every > 0`` (pass@1 on held-out prompts against training samples), and
``method_run.json`` (the method, its paradigm description and the resolved config).

``--resume_from_checkpoint OUTPUT_DIR/checkpoint-N`` (a checkpoint of a run of the same command, saved with
``--save_strategy steps --save_steps K``) continues that run through TRL's own resume; the runner's bookkeeping (reward
counts, learning-curve points, seconds) comes back from the checkpoint too (:mod:`grpo_ext.methods.sittings`), so the
resumed run's records are the uninterrupted run's.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
from pathlib import Path

from grpo_ext.checkpoints import write_run_status
from grpo_ext.methods.config import check_budget, parse_method_args, trained_sequences_per_step
from grpo_ext.methods.cost import (
    COST_FILE,
    CURVE_FILE,
    LOG_FILE,
    RUN_FILE,
    SampleBudget,
    TrainTimer,
    cost_record,
    offline_trained_examples,
    trained_tokens,
    write_json_file,
)
from grpo_ext.methods.curve import add_learning_curve
from grpo_ext.methods.paradigm import get_method
from grpo_ext.methods.sittings import RunProgress, TrainerTokens
from grpo_ext.methods.trainers import NoTrainingData, RunContext

logger = logging.getLogger(__name__)

__all__ = ["run_method", "train_method"]


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
    resume = training_args.resume_from_checkpoint or None
    if resume:  # checked whole before anything is drawn or loaded
        _check_resume(resume, training_args)
    task = get_task(task_args.task, **task_args.task_kwargs)
    train_dataset = require_prompt_column(task_args.train_prompts(task), f"task {task.name!r}")
    ctx = RunContext(method, method_args, task_args, training_args, model_args, task, train_dataset)
    logger.info("method %s: %s", method.name, method.title)

    try:
        trainer = method.build(ctx)
    except NoTrainingData as err:
        return _save_untrained(ctx, str(err), budget)
    timer = TrainTimer()
    trainer.add_callback(timer)
    counters = ctx.details.pop("counters", None)
    if counters and budget:  # refills generate more a step: the budget, not max_steps, ends such a run
        limit = SampleBudget(counters[0], budget, trained_sequences_per_step(method.name, training_args))
        trainer.add_callback(limit)
        trainer.refill_allowance = limit.allowance  # and no refill round passes it
    curve = add_learning_curve(
        trainer,
        task,
        method.name,
        method_args,
        training_args,
        generated=(lambda: counters[0].samples) if counters else (lambda: ctx.cost.get("samples_generated", 0)),
    )
    # what a checkpoint keeps of the runner's own bookkeeping, restored on resume
    rewards = {f"reward{i}": c for i, c in enumerate(counters or [])}
    progress = RunProgress({"timer": timer, "curve": curve, "tokens": TrainerTokens(trainer), **rewards})
    trainer.add_callback(progress)
    from grpo_ext.run_record import training_run

    # the run's record (status, resolved config), as every runner writes it
    with training_run(trainer, task_args, model_args):
        trainer.train(resume_from_checkpoint=resume)
        if hasattr(trainer, "check_rewards_were_scored"):  # GRPO-family: no reward ever scored fails the run
            trainer.check_rewards_were_scored()
        out = Path(training_args.output_dir)
        trainer.save_model(str(out))
        if counters:  # online: what the reward function scored is what was generated
            ctx.cost.update(samples_generated=counters[0].samples, generated_tokens=counters[0].tokens)
        curve_seconds = curve.seconds if curve is not None else 0.0
        train_seconds = timer.seconds - curve_seconds
        trained, unique = _trained_counts(trainer, method, training_args, timer.steps)
        cost = cost_record(
            method.name,
            training_args.seed,
            budget,
            ctx.cost,
            optimizer_steps=timer.steps,
            trained_sequences=trained,
            unique_sequences=unique,
            trained_tokens=trained_tokens(trainer),
            train_seconds=train_seconds,
            curve_seconds=curve_seconds,
            details=ctx.details,
        )
        cost.update(progress.record())
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
                        "method": method.description(),
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


def _check_resume(checkpoint: str, training_args) -> None:
    from grpo_ext.checkpoints import check_resumable
    from grpo_ext.errors import UserError

    check_resumable(checkpoint, training_args.max_steps)
    if training_args.restore_callback_states_from_checkpoint:  # it would replace the runner's callbacks by blank ones
        raise UserError(
            "restore_callback_states_from_checkpoint: the method runners restore their own callbacks' state on resume; "
            "leave it false"
        )
    logger.info("resuming from %s", checkpoint)


def _trained_counts(trainer, method, training_args, steps: int) -> tuple[int, int]:
    """(trained, unique) sequences of a finished run (:mod:`grpo_ext.methods.cost`): an online step trains on the
    fresh generation batch (each sample ``num_iterations`` times); an offline run walks its dataset in epochs."""
    per_example = method.sequences_per_example
    if method.online:
        trained = steps * trained_sequences_per_step(method.name, training_args, trainer.accelerator.num_processes)
        return trained, trained // max(int(getattr(training_args, "num_iterations", 1)), 1)
    examples = len(trainer.train_dataset)
    micro_batch = training_args.per_device_train_batch_size * trainer.accelerator.num_processes
    trained = offline_trained_examples(examples, micro_batch, training_args.gradient_accumulation_steps, steps)
    return trained * per_example, min(examples, trained) * per_example


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
    ctx.tokenizer().save_pretrained(str(out))
    cost = cost_record(
        ctx.method.name,
        ctx.training_args.seed,
        budget,
        ctx.cost,
        optimizer_steps=0,
        trained_sequences=0,
        unique_sequences=0,
        trained_tokens=0,
        train_seconds=0.0,
        curve_seconds=0.0,
        details={**ctx.details, "no_training_data": why},
    )
    write_json_file(out, COST_FILE, cost)
    write_json_file(out, LOG_FILE, [])
    # last, as `training_run` records a trained run: a finished run is one whose record says `complete` (a study
    # reuses only such a run, grpo_ext.experiments.study.provenance.finished_run)
    write_run_status(out, "complete", global_step=0, log_history=[])
    del model
    gc.collect()
    return cost


def run_method(argv: list[str]) -> dict:
    """Parse ``--config configs/methods/<name>.yaml [--flag value ...]`` and train that method."""
    return train_method(*parse_method_args(argv))
