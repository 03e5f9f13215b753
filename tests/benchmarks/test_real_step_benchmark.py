"""benchmarks/real_step.py (the GRPO step by phase, per generation path and dtype) on the embedded model in seconds, and
benchmarks/learning_check.py's resumable commands. No timings are asserted: the JSON's shape and what it records."""

from __future__ import annotations

import json

import pytest
import yaml

from benchmarks import _step_clock, learning_check, real_step
from grpo_ext.checkpoints import write_run_status

TINY = {
    "task": "arithmetic",
    "reward_funcs": ["outcome"],
    "model_name_or_path": "embedded",
    "dtype": "float32",
    "use_peft": True,
    "lora_r": 4,
    "lora_alpha": 8,
    "lora_dropout": 0.0,
    "use_cpu": True,
    "bf16": False,
    "seed": 0,
    "per_device_train_batch_size": 4,
    "gradient_accumulation_steps": 2,  # one generation batch of 8, the loss in 2 micro-batches
    "num_generations": 4,
    "max_completion_length": 8,
    "temperature": 1.0,
    "top_k": 0,
    "beta": 0.0,
    "activation_checkpointing": False,
}


def test_real_step_json_on_a_tiny_recipe(tmp_path, monkeypatch):
    from grpo_ext import policy_loading

    monkeypatch.setattr(policy_loading, "_cpu_flags", lambda: {"avx512_bf16"})  # cpu_bf16: auto would pick bf16 here
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY | {"output_dir": str(tmp_path / "unused"), "cpu_bf16": "auto"}))
    variants = "generate:float32:all_positions,sampler:bfloat16,sampler:bfloat16:shared_prompt"
    argv = ["--config", str(config), "--variants", variants, "--reps", "1", "--warmup", "0", "--out", str(tmp_path)]
    payload = real_step.main([*argv, "--", "--max_completion_length", "4"])  # a flag after -- overrides the config

    saved = json.loads((tmp_path / "real_step.json").read_text())
    assert (
        saved["variants"].keys()
        == payload["variants"].keys()
        == {"generate:float32:all_positions", "sampler:bfloat16", "sampler:bfloat16:shared_prompt"}
    )
    assert saved["device"]["type"] == "cpu" and set(saved["device"]["bf16"]) == {"supported", "flags", "mkldnn_bf16"}
    assert saved["params"]["overrides"] == ["--max_completion_length", "4"] and saved["complete"]
    assert saved["baseline"] == "generate:float32:all_positions"
    for name, v in saved["variants"].items():
        phases = (*_step_clock.PHASES, *_step_clock.CPU_PHASES, "loss_forward_backward", "loss_forward_backward_cpu")
        for phase in phases:
            assert v[phase]["n"] == 1, (name, phase)
        (step,) = v["steps"]
        assert 0 < step["generation"] <= step["step"] and step["loss_forward"] > 0 and step["loss_backward"] > 0
        parts = sum(step[p] for p in ("generation", "scoring", "loss_forward", "loss_backward", "optimizer"))
        assert parts == pytest.approx(step["step"])  # the phases add up to the step
        assert 1 <= v["mean_completion_length"] <= 4 and 0 <= v["clipped_ratio"] <= 1 and 0 <= v["reward"] <= 1
        assert len(v["speedup_over_generate:float32:all_positions"]["values"]) == 1
        assert v["precision"]["trainable_weights"] == v["precision"]["optimizer_state"] == ["torch.float32"]
    precision = {n: v["precision"]["frozen_weights"] for n, v in saved["variants"].items()}  # as the names say
    assert precision == {
        "generate:float32:all_positions": ["torch.float32"],
        "sampler:bfloat16": ["torch.bfloat16"],
        "sampler:bfloat16:shared_prompt": ["torch.bfloat16"],
    }
    assert "| sampler:bfloat16 |" in saved["table"]


def test_real_step_refuses_an_unknown_variant():
    with pytest.raises(SystemExit, match="--variants: 'vllm:float32'"):
        real_step.parse_variants("generate:float32,vllm:float32")
    assert real_step.parse_variants("continuous:bfloat16,generate:float32:all_positions,sampler:bfloat16:eager") == [
        ("continuous", "bfloat16", True, None, False, False),
        ("generate", "float32", False, None, False, False),
        ("sampler", "bfloat16", True, "eager", False, False),
    ]
    assert real_step.parse_variants("sampler:bfloat16:shared_prompt") == [
        ("sampler", "bfloat16", True, None, True, False)
    ]
    # the loss's attention as before issue 49 (the CPU flash kernel), named so in the variant
    assert real_step.parse_variants("sampler:bfloat16:shared_prompt:cpu_flash") == [
        ("sampler", "bfloat16", True, None, True, True)
    ]
    assert (
        real_step.variant_name("sampler", "bfloat16", True, None, True, True)
        == "sampler:bfloat16:shared_prompt:cpu_flash"
    )
    assert real_step.variant_name("sampler", "bfloat16", True, None, True) == "sampler:bfloat16:shared_prompt"
    assert real_step.variant_name("sampler", "bfloat16", True, "eager") == "sampler:bfloat16:eager"
    with pytest.raises(SystemExit, match="all_positions"):
        real_step.parse_variants("generate:float32:some_positions")
    with pytest.raises(SystemExit, match="eager"):
        real_step.parse_variants("generate:float32:eager:eager")


def test_learning_check_resumes_what_is_unfinished(tmp_path, capsys):
    first = learning_check.main(["--out", str(tmp_path), "--dry-run"])
    assert [c[1] for c in first] == ["scripts/train.py", "scripts/train.py", "evals/passk_majk.py"]
    fp32, fast, evaluation = first
    assert fp32[fp32.index("--cpu_bf16") + 1] == "off" and "--cpu_bf16" not in fast  # today's recipe vs the shipped
    assert fp32[fp32.index("--max_steps") + 1] == fast[fast.index("--max_steps") + 1] == "40"
    models = [evaluation[i + 1] for i, a in enumerate(evaluation) if a == "--model"]
    assert models == [str(tmp_path / "fp32" / "model"), str(tmp_path / "fast" / "model")]  # A = fp32, B = fast
    assert (
        evaluation[evaluation.index("--split") + 1] == "validation"
        and evaluation[evaluation.index("--limit") + 1] == "300"
    )

    write_run_status(tmp_path / "fp32" / "model", "complete")  # fp32 finished; fast stopped after step 10
    (tmp_path / "fast" / "model").mkdir(parents=True)
    write_run_status(tmp_path / "fast" / "model", "running")
    (tmp_path / "fast" / "model" / "checkpoint-10").mkdir()
    again = learning_check.main(["--out", str(tmp_path), "--dry-run"])
    assert len(again) == 2 and again[1] == evaluation
    assert again[0][again[0].index("--resume_from_checkpoint") + 1].endswith("checkpoint-10")
    assert "--cpu_bf16" not in again[0]
