"""What the GPU benchmarks share: the CUDA check, device facts, CUDA memory/time probes that are no-ops on the CPU,
and (from :mod:`grpo_ext.stand_ins`, where the GPU smoke check reads them too) the random-weight models of real shapes
(``SHAPES``, ``build_random_model``).
"""

from __future__ import annotations

import hashlib

from grpo_ext.stand_ins import SHAPES, build_random_model

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
