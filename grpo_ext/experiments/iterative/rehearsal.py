"""The ``--quick`` rehearsal of a real-model iterative experiment: every path of it (a chat task with stop strings, a
LoRA policy merged each iteration, a LoRA PRM on a bf16 body, the start's hash check, the report) on a tiny random
model with the real model's tokenizer, in minutes. Its numbers mean nothing.

The model is the study's rehearsal model (:func:`grpo_ext.experiments.study.rehearsal.tiny_model_like`: a random Llama
of a few thousand weights, the base's tokenizer retrained on the task's text) with one change: the study's makes digits
undrawable (its RFT and DPO must find no right sample), while here the reward model needs samples with numbers in
them, or no line would ever be checked and there would be nothing to train it on. The rehearsal start is written as
a study start is (``<out>/model`` and ``<out>/start.json`` with its ``model_sha256``), so the hash check runs too.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["QUICK_FLAGS", "quick_argv", "rehearsal_start"]

#: The rehearsal's sizes, as command-line flags over the real config (flags override YAML): 2 seeds x 3 arms x 2
#: iterations of 2 GRPO steps of 8 samples, RM and evaluation on a handful of prompts.
QUICK_FLAGS = {
    "seeds": "0,1",
    "iterations": "2",
    "train_size": "16",
    "max_steps": "2",
    "per_device_train_batch_size": "8",
    "gradient_accumulation_steps": "1",
    "num_generations": "4",
    "max_completion_length": "32",
    "rm_prompts": "8",
    "rm_samples_per_prompt": "2",
    "rm_initial_epochs": "1",
    "rm_epochs": "1",
    "rm_batch_size": "8",
    "rm_lora_r": "4",
    "rm_eval_prompts": "8",
    "rm_heldout_prompts": "4",
    "rm_eval_samples_per_prompt": "2",
    "eval_prompts": "8",
    "eval_samples": "4",
    "sampling_batch_size": "8",
    "lora_r": "4",
}


def quick_argv(argv: list[str], start: Path, sha256: str, output_dir: str) -> list[str]:
    """``argv`` with the rehearsal's sizes, its start and its own output folder (the real run's is never touched)."""
    flags = {**QUICK_FLAGS, "model_name_or_path": str(start), "start_sha256": sha256, "output_dir": output_dir}
    out = list(argv)
    for key, value in flags.items():
        out += [f"--{key}", value]
    return out


def rehearsal_start(source: str | Path, out: Path, task, tiny_models: Path, seed: int = 0) -> tuple[Path, str]:
    """``(model folder, its sha256)``: the rehearsal start in ``out/model`` with ``out/start.json`` (kept when it
    is there already and its weights still hash to its record)."""
    import json

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_ext.experiments.study.rehearsal import REHEARSAL_VOCAB, tiny_model_like
    from grpo_ext.experiments.study.start import START_RECORD, weights_hash
    from grpo_ext.io import atomic_write_json

    model_dir, record_path = Path(out) / "model", Path(out) / START_RECORD
    if (model_dir / "config.json").is_file() and record_path.is_file():
        sha = json.loads(record_path.read_text()).get("model_sha256")
        if sha == weights_hash(model_dir):
            return model_dir, sha
    # a folder of its own: the study's rehearsal model (another corpus) is never rebuilt under the study's feet
    tiny = tiny_model_like(source, tiny_models / f"iterative-{Path(str(source)).name}-{REHEARSAL_VOCAB}", tasks=[task])
    model = AutoModelForCausalLM.from_pretrained(tiny, use_safetensors=True, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    weight = model.get_output_embeddings().weight
    generator = torch.Generator(device="cpu").manual_seed(seed)
    with torch.no_grad():
        # every output row random again (digits included): numbers appear, lines get checked, the RM has labels
        weight.copy_(torch.randn(weight.shape, generator=generator, device="cpu").to(weight))
    model.to(torch.bfloat16).save_pretrained(model_dir, safe_serialization=True)
    tokenizer.save_pretrained(model_dir)
    sha = weights_hash(model_dir)
    atomic_write_json(record_path, {"label": "rehearsal start (random weights)", "model_sha256": sha})
    return model_dir, sha
