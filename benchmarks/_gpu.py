"""What the GPU benchmarks and the GPU smoke check share: the CUDA check, device facts, random-weight models of real
shapes built locally, and CUDA memory/time probes that are no-ops on the CPU.

Models: Qwen2-architecture models with Qwen2.5-0.5B / -1.5B's published shapes and the real vocabulary (151,936;
the shapes of ``benchmarks.qlora_memory.SHAPES``), random weights (seed 0), saved as safetensors with the embedded
model's character tokenizer (its decode skips ids it does not know, so any sampled id decodes). Speed and memory
depend on the shapes, not on the weights; nothing is downloaded. ``tiny`` (hidden 64, vocabulary 1,000) is for
rehearsals of the code paths on the CPU.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from benchmarks.qlora_memory import SHAPES

__all__ = [
    "SHAPES",
    "build_random_model",
    "smoke_reward",
    "cuda_unavailable_reason",
    "device_facts",
    "max_allocated",
    "reset_peak",
    "synchronize",
]

# A minimal chat template (Qwen's layout) so that conversational prompts render with the character tokenizer.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def cuda_unavailable_reason() -> str | None:
    """None when a CUDA device is usable, else one sentence saying why not (what the skip message prints)."""
    import torch

    if torch.cuda.is_available():
        return None
    built = f"built with CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
    return f"no CUDA device (torch.cuda.is_available() is False; torch {torch.__version__}, {built})"


def device_facts(device) -> dict:
    """The accelerator a result was measured on (recorded in every GPU result)."""
    import torch

    device = torch.device(device)
    facts = {"type": device.type, "torch": torch.__version__, "cuda": torch.version.cuda}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        facts |= {
            "name": torch.cuda.get_device_name(device),
            "capability": ".".join(map(str, torch.cuda.get_device_capability(device))),
            "memory_gib": round(props.total_memory / 2**30, 1),
            "bf16_supported": torch.cuda.is_bf16_supported(),
        }
    else:
        facts["name"] = "cpu"
    return facts


def synchronize(device) -> None:
    """Wait for queued CUDA work (timings must include it); nothing on the CPU."""
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def max_allocated(device) -> int | None:
    """Peak bytes held by CUDA tensors since the last :func:`reset_peak` (None on the CPU)."""
    import torch

    return int(torch.cuda.max_memory_allocated(device)) if torch.device(device).type == "cuda" else None


def allocated(device) -> int | None:
    import torch

    return int(torch.cuda.memory_allocated(device)) if torch.device(device).type == "cuda" else None


def build_random_model(shape: str, folder: str | Path, *, dtype: str = "bfloat16", device: str = "cpu") -> Path:
    """Save a random-weight Qwen2 model of ``shape`` (a key of ``SHAPES``) with the embedded character tokenizer
    (plus a chat template) into ``folder``; returns the folder. ``device`` is where the weights are initialised
    (``cuda``: seconds for 1.5 B parameters instead of a minute on one CPU thread); the file is the same."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config

    from grpo_ext.models import EMBEDDED_MODEL_DIR

    folder = Path(folder)
    tokenizer = AutoTokenizer.from_pretrained(EMBEDDED_MODEL_DIR)
    tokenizer.model_max_length = 32768  # prompts of real tasks are longer than the embedded task's 128 characters
    tokenizer.chat_template = CHAT_TEMPLATE
    ids = {"pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id, "bos_token_id": None}
    config = Qwen2Config(**SHAPES[shape], **ids)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    del model
    return folder


def smoke_reward(prompts, completion_ids, **kwargs) -> list[float]:
    """A reward with learning signal for a random-weight policy, whose answers the task's verifier scores 0 (so its
    advantages, and gradients, would all be 0): the share of even token ids in the completion, for the prompts whose
    stable hash is odd; 0 for the others, so about half the groups have no signal (what `zero_std_groups` acts on).
    For smoke checks (scripts/gpu_check.py: ``--reward_funcs outcome benchmarks._gpu.smoke_reward``), not training."""
    out = []
    for prompt, ids in zip(prompts, completion_ids, strict=True):
        scored = hashlib.sha256(str(prompt).encode()).digest()[0] % 2 == 1
        out.append(sum(1 for t in ids if t % 2 == 0) / max(len(ids), 1) if scored else 0.0)
    return out
