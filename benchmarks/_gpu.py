"""What the GPU benchmarks share: the CUDA check, device facts, CUDA memory/time probes that are no-ops on the CPU,
and (from :mod:`grpo_ext.stand_ins`, where the GPU smoke check reads them too) the random-weight models of real shapes
(``SHAPES``, ``build_random_model``).
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

from grpo_ext.stand_ins import SHAPES, build_random_model

__all__ = [
    "SHAPES",
    "ABSOLUTE_PATH",
    "absolute_paths",
    "build_random_model",
    "portable_text",
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


# ---- results that name no folder of the machine that ran them ----------------------------------------------------

#: A path of a machine's own folders (a scratch folder, an interpreter's packages, a checkout), also behind ``../``:
#: what a committed result must not hold (benchmarks/results/gpu_*/ is tested for it).
ABSOLUTE_PATH = re.compile(
    r"(?:^|(?<=[\s\"'(=:,\[])|(?<=\.\.))/(?:tmp|opt|work|home|root|usr|var|mnt|srv|data|scratch|Users|private)/[^\s\"',)]*"
)
_PACKAGES = re.compile(r"(?:(?:\.\./)*\.\.)?(?:/[^\s\"'/:,()\[\]]+)+/((?:site|dist)-packages)/")
_STDLIB = re.compile(r"(?:/[^\s\"'/:,()\[\]]+)+/lib/(python\d[\d.]*)/")
_INTERPRETER = re.compile(r"(?:/[^\s\"'/:,()\[\]]+)+/bin/(python[\d.]*)\b")
_GPU_STEP_MODEL = re.compile(r"/tmp/grpo_ext_gpu_step_model_\w+/")
_SCRATCH = re.compile(r"(?<![\w.])/tmp/(?=\w)")


def portable_text(text: str, root: str | Path | None = None) -> str:
    """A GPU run's log or JSON as committed: the checkout (``root``, default this one) named relative to it, an
    interpreter as ``python``, its packages and library as ``site-packages/...`` and ``python3.12/...``, gpu_step's
    model folder as ``model/`` and other scratch folders without their ``/tmp/`` (as in
    benchmarks/results/gpu_2026-11-28/). What is left, :func:`absolute_paths` finds."""
    root = str(Path(root) if root is not None else Path(__file__).resolve().parents[1]).rstrip("/")
    text = text.replace(root + "/", "").replace(root, ".")
    for executable in {sys.executable, str(Path(sys.executable).resolve())}:
        text = text.replace(executable, "python")
    text = _INTERPRETER.sub(r"\1", text)
    text = _PACKAGES.sub(r"\1/", text)
    text = _STDLIB.sub(r"\1/", text)
    text = _GPU_STEP_MODEL.sub("model/", text)
    return _SCRATCH.sub("", text)


def absolute_paths(text: str) -> list[str]:
    """The machine paths (:data:`ABSOLUTE_PATH`) in ``text``, in order."""
    return [m.group(0) for m in ABSOLUTE_PATH.finditer(text)]
