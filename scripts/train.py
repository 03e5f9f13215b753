"""GRPO training on a verifiable task (YAML through TrlParser; command-line flags override the YAML).

accelerate launch scripts/train.py --config configs/qlora.yaml [--max_steps 20 ...]
python scripts/train.py --config configs/default.yaml

The output folder records whether the run finished (`grpo_ext_run.json`: running, complete or failed), so a run
stopped by a full disk or a kill is never taken for a complete one (scripts/publish.py refuses it). One run at a
time writes into a folder (a lock), and a folder holding another run's results is refused unless
`--resume_from_checkpoint` continues that run or `--overwrite_output_dir true` replaces it (`grpo_ext.run_folder`).
"""

from __future__ import annotations


def main(argv: list[str]) -> None:
    from grpo_ext.checkpoints import check_resumable
    from grpo_ext.run_folder import OutputFolderLock, check_loads_outside, prepare_output_dir
    from grpo_ext.script_args import parse_train_args

    task_args, training_args, model_args = parse_train_args(argv)
    check_loads_outside(training_args.output_dir, _loaded_paths(model_args, training_args))
    resume = training_args.resume_from_checkpoint
    if resume:  # a checkpoint folder or nothing; checked whole before any model is loaded
        check_resumable(resume, max_steps=training_args.max_steps)
    if training_args.process_index != 0:  # the main process holds the folder for all of them
        return _train(task_args, training_args, model_args)
    with OutputFolderLock(training_args.output_dir):
        prepare_output_dir(training_args.output_dir, resume=resume, overwrite=task_args.overwrite_output_dir)
        _train(task_args, training_args, model_args)


def _loaded_paths(model_args, training_args) -> dict[str, str | None]:
    """The folders the run loads (field -> path): the policy (TRL rebuilds the reference model from the same path),
    an adapter's base, the process reward model."""
    import contextlib
    import json
    from pathlib import Path

    model = model_args.model_name_or_path
    loads = {"model_name_or_path": model, "process_reward_model": training_args.process_reward_model}
    # a missing or broken adapter config is no adapter here; it is named where the model is loaded
    with contextlib.suppress(ValueError, KeyError, OSError, TypeError):
        base = json.loads((Path(model).expanduser() / "adapter_config.json").read_text())["base_model_name_or_path"]
        loads["model_name_or_path (the adapter's base)"] = base
    return loads


def _train(task_args, training_args, model_args) -> None:
    from grpo_ext.assembly import build_grpo_trainer
    from grpo_ext.errors import UserError, user_input
    from grpo_ext.prompt_fit import check_trainer_prompts
    from grpo_ext.run_record import training_run
    from grpo_ext.tasks import get_task
    from grpo_ext.validation import context_overflow

    with user_input("task"):
        task = get_task(task_args.task, **task_args.task_kwargs)
    trainer = build_grpo_trainer(
        task,
        training_args,
        model_args=model_args,
        reward_funcs=task_args.reward_funcs,
        train_size=task_args.train_size,
    )
    overflow = context_overflow(trainer)
    if overflow:  # the Python API only warns, as TRL takes it; a command line refuses it before any step
        raise UserError(overflow)
    # every prompt rendered and measured as TRL will: one over the model's positions, or a chat template that fails
    check_trainer_prompts(trainer, f"task {task.name!r} train prompts")
    main_process = trainer.accelerator.is_main_process
    model_id = model_args.model_name_or_path  # resolved by policy_init
    if main_process:
        from grpo_ext.memory_footprint import log_memory_footprint

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
    # the run's record (status, resolved config), as every runner writes it: grpo_ext.run_record.training_run
    with training_run(trainer, task_args, model_args) as run:
        trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
        trainer.check_rewards_were_scored()  # a run that scored no reward fails here, before a model is saved
        trainer.save_state()  # trainer_state.json: the real step count for the model card
        trainer.save_model(training_args.output_dir)
        if main_process:
            trainer.processing_class.save_pretrained(training_args.output_dir)
        run.save_config()
        trainer.create_model_card()  # the card of the final model (the last one was a checkpoint's); main process only
    if main_process:
        print(f"saved to {training_args.output_dir}")
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=task.name)


if __name__ == "__main__":
    from grpo_ext.cli import run_cli

    run_cli(main)
