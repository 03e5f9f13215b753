"""GRPO training on a verifiable task (YAML through TrlParser; command-line flags override the YAML).

accelerate launch scripts/train.py --config configs/qlora.yaml [--max_steps 20 ...]
python scripts/train.py --config configs/default.yaml
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from grpo_ext.hub import CONFIG_FILE
from grpo_ext.io import atomic_write_text


def parse_args(argv: list[str]):
    from trl import ModelConfig, TrlParser

    from grpo_ext.config import GRPOExtConfig
    from grpo_ext.script_args import TaskArguments

    parser = TrlParser((TaskArguments, GRPOExtConfig, ModelConfig))
    return parser.parse_args_and_config(argv)


def save_resolved_config(output_dir: str, task_args, training_args, model_args) -> Path:
    """All three argument groups as one YAML, next to the model (what was really run)."""
    resolved = {
        "task": dataclasses.asdict(task_args),
        "training": training_args.to_dict(),
        "model": {k: v for k, v in dataclasses.asdict(model_args).items()},
    }
    return atomic_write_text(
        Path(output_dir) / CONFIG_FILE, yaml.safe_dump(resolved, sort_keys=False, default_flow_style=False)
    )


def main(argv: list[str]) -> None:
    from grpo_ext.assembly import build_grpo_trainer
    from grpo_ext.tasks import get_task

    task_args, training_args, model_args = parse_args(argv)
    task = get_task(task_args.task, **task_args.task_kwargs)
    trainer = build_grpo_trainer(
        task,
        training_args,
        model_args=model_args,
        reward_funcs=task_args.reward_funcs,
        train_size=task_args.train_size,
    )
    model_id = model_args.model_name_or_path  # resolved by policy_init
    if trainer.accelerator.is_main_process:
        from grpo_ext.modeling import log_memory_footprint

        log_memory_footprint(trainer.model, model_id)
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
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_state()  # trainer_state.json: the real step count for the model card
    trainer.save_model(training_args.output_dir)
    if trainer.accelerator.is_main_process:
        trainer.processing_class.save_pretrained(training_args.output_dir)
        save_resolved_config(training_args.output_dir, task_args, training_args, model_args)
        print(f"saved to {training_args.output_dir}")
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=task.name)


if __name__ == "__main__":
    from grpo_ext.cli import run_cli

    run_cli(main)
