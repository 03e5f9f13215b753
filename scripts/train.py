"""GRPO training on a verifiable task (YAML through TrlParser; command-line flags override the YAML).

accelerate launch scripts/train.py --config configs/qlora.yaml [--max_steps 20 ...]
python scripts/train.py --config configs/default.yaml

The output folder records whether the run finished (`grpo_ext_run.json`: running, complete or failed), so a run
stopped by a full disk or a kill is never taken for a complete one (scripts/publish.py refuses it).
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

import yaml

from grpo_ext.hub import CONFIG_FILE
from grpo_ext.io import atomic_write_text, portable_path

# Path-valued fields of the resolved config, recorded relative to the output folder or the repository.
_PATH_FIELDS = {"training": ("output_dir", "logging_dir", "resume_from_checkpoint"), "model": ("model_name_or_path",)}


def parse_args(argv: list[str]):
    """The three argument groups; whatever they reject is a `UserError` (see `grpo_ext.cli.parse_trl_config`)."""
    from trl import ModelConfig

    from grpo_ext.cli import parse_trl_config
    from grpo_ext.config import GRPOExtConfig
    from grpo_ext.script_args import TaskArguments

    return parse_trl_config((TaskArguments, GRPOExtConfig, ModelConfig), argv)


def save_resolved_config(output_dir: str, task_args, training_args, model_args) -> Path:
    """All three argument groups as one YAML, next to the model (what was really run). Paths are recorded relative to
    the output folder or the repository (the shipped base model as `embedded`, a real model by its name), so the
    record names no folder of the machine that ran it."""
    from grpo_ext.models import known_model_name

    resolved = {
        "task": dataclasses.asdict(task_args),
        "training": training_args.to_dict(),
        "model": {k: v for k, v in dataclasses.asdict(model_args).items()},
    }
    for section, fields in _PATH_FIELDS.items():
        for field in fields:
            value = resolved[section].get(field)
            if isinstance(value, str) and value:
                resolved[section][field] = known_model_name(value) or portable_path(value, base=output_dir)
    return atomic_write_text(
        Path(output_dir) / CONFIG_FILE, yaml.safe_dump(resolved, sort_keys=False, default_flow_style=False)
    )


def main(argv: list[str]) -> None:
    from grpo_ext.assembly import build_grpo_trainer
    from grpo_ext.checkpoints import write_run_status
    from grpo_ext.cli import one_line
    from grpo_ext.errors import UserError, user_input
    from grpo_ext.tasks import get_task

    task_args, training_args, model_args = parse_args(argv)
    resume = training_args.resume_from_checkpoint
    if resume and not Path(resume).expanduser().is_dir():  # not taken for anything else: a checkpoint folder or nothing
        raise UserError(
            f"resume_from_checkpoint: no such checkpoint folder: {resume} (expected OUTPUT_DIR/checkpoint-N)"
        )
    with user_input("task"):
        task = get_task(task_args.task, **task_args.task_kwargs)
    trainer = build_grpo_trainer(
        task,
        training_args,
        model_args=model_args,
        reward_funcs=task_args.reward_funcs,
        train_size=task_args.train_size,
    )
    main_process = trainer.accelerator.is_main_process
    model_id = model_args.model_name_or_path  # resolved by policy_init
    if main_process:
        from grpo_ext.modeling import log_memory_footprint

        log_memory_footprint(trainer.model, model_id)
        write_run_status(training_args.output_dir, "running", max_steps=training_args.max_steps)
    if task_args.passk_eval_steps:
        from grpo_ext.evaluation.callback import make_passk_callback

        make_passk_callback(
            task,
            task_args.passk_eval_prompts,
            task_args.passk_eval_n,
            task_args.passk_eval_k,
            every=task_args.passk_eval_steps,
            temperature=training_args.temperature,
            seed=training_args.seed,
            trainer=trainer,
        )
    try:
        trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
        trainer.save_state()  # trainer_state.json: the real step count for the model card
        trainer.save_model(training_args.output_dir)
        if main_process:
            trainer.processing_class.save_pretrained(training_args.output_dir)
            save_resolved_config(training_args.output_dir, task_args, training_args, model_args)
            trainer.create_model_card()  # the card of the final model (the last one was a checkpoint's)
    except Exception as err:
        if main_process:  # best effort: with a full disk even this can fail, and the status stays `running`
            with contextlib.suppress(OSError):
                step = trainer.state.global_step
                write_run_status(training_args.output_dir, "failed", error=one_line(err), step=step)
        raise
    if main_process:
        write_run_status(training_args.output_dir, "complete", global_step=trainer.state.global_step)
        print(f"saved to {training_args.output_dir}")
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=task.name)


if __name__ == "__main__":
    from grpo_ext.cli import run_cli

    run_cli(main)
