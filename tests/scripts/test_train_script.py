"""scripts/train.py end to end (offline, CPU): the main QLoRA config runs and writes a loadable adapter."""

import subprocess

import pytest
import torch
import yaml
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from grpo_ext.model_paths import EMBEDDED_MODEL_DIR

FAST = ["--max_steps", "2", "--per_device_train_batch_size", "8", "--num_generations", "4", "--logging_steps", "1"]


def run_train(python, root, *args, check=True):
    proc = subprocess.run([python, "scripts/train.py", *args], cwd=root, capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"train.py failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


@pytest.mark.slow
def test_qlora_config_trains_two_steps_and_writes_a_peft_adapter(python, root, tmp_path):
    out = tmp_path / "run"
    proc = run_train(
        python,
        root,
        "--config",
        "configs/qlora.yaml",
        "--output_dir",
        str(out),
        *FAST,
        "--passk_eval_steps",
        "1",
        "--passk_eval_prompts",
        "4",
        "--passk_eval_n",
        "2",
        "--passk_eval_k",
        "1",
        "2",
    )
    assert "eval/pass@2" in proc.stdout + proc.stderr and "eval/maj@2" in proc.stdout + proc.stderr  # the callback
    assert (out / "adapter_config.json").is_file() and (out / "adapter_model.safetensors").is_file()
    resolved = yaml.safe_load((out / "grpo_ext_config.yaml").read_text())
    assert resolved["training"]["max_steps"] == 2  # the flag overrode the YAML
    assert resolved["model"]["load_in_4bit"] is True

    base = AutoModelForCausalLM.from_pretrained(EMBEDDED_MODEL_DIR)
    model = PeftModel.from_pretrained(base, out)
    lora = [n for n, _ in model.named_parameters() if "lora_" in n]
    assert any("mlp" in n for n in lora) and any("self_attn" in n for n in lora)  # all projections by default
    tok = AutoTokenizer.from_pretrained(out)
    ids = tok("12+3=", return_tensors="pt", add_special_tokens=False)
    generated = model.generate(**ids, max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id)
    assert generated.shape[1] > ids["input_ids"].shape[1]
    assert torch.equal(generated[0, :5], ids["input_ids"][0])


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model_name_or_path", "/nonexistent/model"], "model_name_or_path: no such model folder"),
        (["--task", "arithmetc"], "unknown task 'arithmetc'"),
        (["--task_kwargs", "{max_operands: 3"], "task_kwargs: expected a JSON object"),
    ],
)
def test_bad_input_gets_one_readable_line(python, root, tmp_path, args, message):
    proc = run_train(python, root, "--config", "configs/qlora.yaml", "--output_dir", str(tmp_path), *args, check=False)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unknown_config_key_is_named(python, root, tmp_path):
    config = yaml.safe_load((root / "configs/qlora.yaml").read_text())
    config["lerning_rate"] = 1e-4
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = run_train(python, root, "--config", str(path), check=False)
    assert proc.returncode == 2
    assert "lerning_rate" in proc.stderr and "Traceback" not in proc.stderr


def test_dataset_without_prompt_column_is_refused():
    from datasets import Dataset

    from grpo_ext.tasks.base import require_prompt_column

    with pytest.raises(ValueError, match=r"my data: dataset has no 'prompt' column \(columns: \['question'\]\)"):
        require_prompt_column(Dataset.from_dict({"question": ["1+1="]}), "my data")
    with pytest.raises(ValueError, match="empty"):
        require_prompt_column(Dataset.from_dict({"prompt": []}), "my data")
