"""GRPOExtConfig documents every field it adds, in TRL's docstring layout, and keeps each field's help."""

from __future__ import annotations

import dataclasses
import re

from trl import GRPOConfig

from grpo_ext.config import GRPOExtConfig


def _own_fields():
    inherited = {f.name for f in dataclasses.fields(GRPOConfig)}
    return [f for f in dataclasses.fields(GRPOExtConfig) if f.name not in inherited]


def test_every_field_is_documented_in_the_class_docstring_and_has_help():
    doc = GRPOExtConfig.__doc__
    assert "Parameters:" in doc and doc.count("> Parameters that control") >= 3
    documented = re.findall(r"^ {8}(\w+) \(`", doc, flags=re.MULTILINE)
    own = [f.name for f in _own_fields()]
    assert own and documented == own  # every field, once, in declaration order
    for f in _own_fields():
        assert f.metadata.get("help"), f.name


def test_gpu_process_prm_config_parses_with_the_training_script_dataclasses(root):
    """configs/gpu/process_prm_gsm8k.yaml (Math-Shepherd PRM, QLoRA Qwen2.5-Math policy) is untested on a GPU here:
    every field must parse through TrlParser with scripts/train.py's dataclasses, and name what the PRM loader reads."""
    from grpo_ext.rewards.prm_formats import STEP_TAG_DEFAULTS
    from grpo_ext.script_args import parse_train_args as parse_args
    from grpo_ext.tasks import get_task

    # --use_cpu only because transformers refuses bf16 without a GPU at parse time; everything else is the file's
    task_args, training_args, model_args = parse_args(
        ["--config", str(root / "configs/gpu/process_prm_gsm8k.yaml"), "--use_cpu", "true"]
    )
    task = get_task(task_args.task, **task_args.task_kwargs)
    assert task.name == "gsm8k" and task.step_separator == "step_k"
    assert model_args.model_name_or_path.startswith("Qwen/Qwen2.5-Math-") and model_args.load_in_4bit
    assert model_args.use_peft
    assert training_args.advantage_mode == "process" and training_args.process_include_outcome
    assert training_args.process_reward_model == "peiyi9979/math-shepherd-mistral-7b-prm"
    assert training_args.process_reward_model_format == "step_tag"
    assert training_args.process_reward_model_load_in_4bit
    assert training_args.process_reward_model_batch_size == 16
    step_tag_fields = {
        "step_tag": training_args.process_reward_model_step_tag,
        "good_token": training_args.process_reward_model_good_token,
        "bad_token": training_args.process_reward_model_bad_token,
    }
    assert step_tag_fields == STEP_TAG_DEFAULTS  # Math-Shepherd's model card
    assert training_args.step_separator is None  # filled in from the task by build_grpo_trainer
    assert "Step k:" in task.build_prompt("q")


def test_prm_fields_keep_trl_behaviour_by_default(tmp_path):
    args = GRPOExtConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none")
    assert args.process_reward_model is None and args.process_reward_model_format is None
    assert not args.process_reward_model_load_in_4bit and args.process_reward_model_batch_size == 16
