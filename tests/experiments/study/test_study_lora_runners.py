"""Every runner of the unified paradigm on a LoRA policy with a chat-format task, as the real-model study trains
(configs/real/methods: LoRA r16, a bf16 base, word_arithmetic's chat prompts), on a tiny random model with a
byte-level BPE tokenizer and a chat template (no real model): SFT and DPO data in the prompt's chat format, draws cut
at stop strings, RFT without a correct sample keeping the base."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TASK_KWARGS = {"min_operands": 2, "max_operands": 2, "digits": 2, "num_fewshot": 2, "balance_operations": True}


def test_completions_take_their_prompt_format_and_draws_are_cut_at_stop_strings():
    from grpo_ext.methods.draws import as_completion, cut_at_stop, dpo_pairs
    from grpo_ext.tasks import get_task

    chat = [{"role": "user", "content": "Question: Mia has 3 apples. Then Mia buys 4 more apples. ..."}]
    assert as_completion(chat, "3 + 4 = 7\n#### 7") == [{"role": "assistant", "content": "3 + 4 = 7\n#### 7"}]
    assert as_completion("3+4=", "7") == "7"
    assert cut_at_stop("#### 7\n\nQuestion: Leo has 9", ("Question:",)) == "#### 7\n\n"
    assert cut_at_stop("#### 7", ("Question:",)) == "#### 7" and cut_at_stop("a Q b", ()) == "a Q b"
    task = get_task("word_arithmetic", num_fewshot=0)
    (pair,) = dpo_pairs(task, [chat], ["7"], [["#### 7", "#### 8"]], max_pairs=1, seed=0)
    assert pair["chosen"] == [{"role": "assistant", "content": "#### 7"}] and pair["rejected"][0]["content"] == "#### 8"


@pytest.fixture(scope="module")
def tiny_chat_model(tmp_path_factory):
    """A random tiny Llama with a byte-level BPE tokenizer and a chat template (SmolLM2's layout), 4096 positions."""
    from grpo_ext.experiments.study.rehearsal import tiny_model_like
    from grpo_ext.real_model_fetch import convert_gguf
    from tests.gguf_fixture import write_tiny_gguf

    folder = tmp_path_factory.mktemp("tiny_chat")
    write_tiny_gguf(folder / "tiny.gguf")
    converted = convert_gguf(folder / "tiny.gguf", folder / "converted", source={"package": "test"})
    return tiny_model_like(converted, folder / "model")


RUN_FLAGS = [
    "--train_size", "4", "--max_steps", "1", "--gradient_accumulation_steps", "1", "--curve_every", "0",
    "--disable_tqdm", "true",
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("method", ["sft", "rft", "dpo", "grpo_outcome", "grpo_process"])
def test_every_runner_trains_a_lora_policy_on_the_chat_task(method, tiny_chat_model, tmp_path, monkeypatch):
    """The real study's own method configs (LoRA r16, bf16 base, word_arithmetic chat prompts) on the tiny model:
    one step each. RFT and DPO draw hand-made samples (a random model is never right): a right and a wrong one per
    prompt, so both have data in the chat format; DPO's pairs go through TRL's DPOTrainer."""
    import trl.trainer.utils as trl_utils

    import grpo_ext.methods.draws as draws
    from grpo_ext.methods import run_method

    # as in a fresh process: TRL's own choice of the positions its fused LM head scores (every one on a CPU)
    original = getattr(trl_utils._use_triton, "__wrapped__", trl_utils._use_triton)
    monkeypatch.setattr(trl_utils, "_use_triton", original)

    def draw(ctx):
        prompts, answers = list(ctx.train_dataset["prompt"]), [str(a) for a in ctx.train_dataset["answer"]]
        ctx.cost.update(samples_generated=8, generated_tokens=80, sampling_seconds=0.0)
        return prompts, answers, [[f"#### {a}", f"#### {int(a) + 1}"] for a in answers]

    monkeypatch.setattr(draws, "draw_from_base", draw)
    config = ROOT / "configs" / "real" / "methods" / f"{method}.yaml"
    flags = ["--model_name_or_path", str(tiny_chat_model), "--output_dir", str(tmp_path), *RUN_FLAGS]
    flags += ["--task_kwargs", json.dumps({**TASK_KWARGS, "num_fewshot": 0})]  # byte tokens: keep prompts short
    if method in ("rft", "dpo"):
        flags += ["--samples_per_prompt", "2", "--sample_budget", "8", "--per_device_train_batch_size", "2"]
        flags += ["--max_length", "1024"]
    elif method != "sft":
        flags += ["--per_device_train_batch_size", "8", "--num_generations", "4", "--max_completion_length", "8"]
        flags += ["--sample_budget", "8"]
    else:
        flags += ["--per_device_train_batch_size", "2", "--max_length", "1024"]
    cost = run_method(["--config", str(config), *flags])
    assert cost["optimizer_steps"] == 1, cost
    adapter = json.loads((tmp_path / "adapter_config.json").read_text())
    assert adapter["r"] == 16 and (tmp_path / "adapter_model.safetensors").is_file()
    run = json.loads((tmp_path / "method_run.json").read_text())
    assert run["model"]["dtype"] == "bfloat16" and run["task"]["task"] == "word_arithmetic"
    if method == "dpo":
        assert cost["details"]["pairs"] == 4
    # every method's loss scored only the labelled (completion) positions on the CPU (policy_loading)
    assert trl_utils._use_triton.grpo_ext_cpu_compact


@pytest.mark.slow
def test_rft_without_a_correct_sample_keeps_the_base(tiny_chat_model, tmp_path):
    """GC 0 on every sample: no update. The run's model is the base (a fresh LoRA adapter), its record says why."""
    from grpo_ext.evaluation.backends import load_model_and_tokenizer
    from grpo_ext.methods import run_method

    config = ROOT / "configs" / "real" / "methods" / "rft.yaml"
    flags = ["--model_name_or_path", str(tiny_chat_model), "--output_dir", str(tmp_path), *RUN_FLAGS]
    flags += ["--task_kwargs", json.dumps({**TASK_KWARGS, "num_fewshot": 0})]
    flags += [
        "--samples_per_prompt",
        "2",
        "--sample_budget",
        "8",
        "--sample_max_new_tokens",
        "4",
        "--max_length",
        "1024",
    ]
    cost = run_method(["--config", str(config), *flags])
    assert cost["optimizer_steps"] == 0 and "no training examples" in cost["details"]["no_training_data"]
    assert cost["samples_generated"] == 8
    from grpo_ext.checkpoints import read_run_status

    assert read_run_status(tmp_path)["status"] == "complete"  # finished: a study reuses it (provenance.finished_run)
    model, _ = load_model_and_tokenizer(str(tmp_path), device="cpu")  # evaluable as any run
    base, _ = load_model_and_tokenizer(str(tiny_chat_model), device="cpu")
    import torch

    ids = torch.tensor([[5, 60, 86]])
    assert torch.allclose(model(ids).logits, base(ids).logits)
