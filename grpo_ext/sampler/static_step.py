"""The fixed-shape decode step of the continuous sampler (:mod:`grpo_ext.sampler.continuous`), for CUDA.

On a GPU a decode step of a small model is launch-bound: hundreds of kernel launches, each costing more than its
work. Capturing the step once (``torch.compile(mode="reduce-overhead")``: CUDA graphs, as transformers'
``generate(cache_implementation="static")`` and gpt-fast do) replays them for the cost of one launch, but only if
every step has the same shapes and reads its inputs at the same addresses. The eager step has neither: attention
reads a cache view ``[:, :, :column + 1]``, the mask is sliced to match, the cache write uses a Python column, and
every slot's next input is written with its own indexing call. The *static* step instead:

- reads the whole cache buffer ``[slots, heads, capacity, dim]`` with the whole ``[slots, capacity]`` mask (the
  columns beyond the current one are masked and hold zeros), and writes the new column with ``index_copy_`` at a
  device tensor (:class:`grpo_ext.sampler.slot_cache.SlotCache` with ``static=True``);
- keeps every slot's next input token and position in host arrays, copied to fixed device tensors once a step
  (:class:`StepInputs`);
- drops free slots only down to a power-of-two *bucket* (:func:`bucket`): a compiled step sees a few batch sizes
  per call, never one per step.

The samples do not depend on the mode (the same keys/values, mask and draws): ``decode`` is an execution detail,
like the batch size. Modes (:data:`DECODE_MODES`, resolved by :func:`resolve_decode`): ``eager`` (today's step,
the fastest on a CPU, where compute hides launches), ``static`` (the fixed-shape step, not compiled), ``compiled``
(the fixed-shape step through ``torch.compile``), ``auto`` (``compiled`` where the model is on CUDA and
compileable, else ``eager``).
"""

from __future__ import annotations

import logging

import numpy as np
import torch

logger = logging.getLogger(__name__)

__all__ = ["DECODE_MODES", "StepInputs", "bucket", "compiled_forward", "resolve_decode"]

DECODE_MODES = ("auto", "eager", "static", "compiled")

#: ``torch.compile`` options of the ``compiled`` mode: transformers' own ``CompileConfig`` defaults for a static
#: cache (inductor, CUDA graphs, automatic dynamic shapes: a second batch size or capacity makes that dimension
#: symbolic instead of compiling once per size).
COMPILE_OPTIONS = {"mode": "reduce-overhead", "fullgraph": False, "dynamic": None}

# options key -> the compiled forward. It takes the model as an argument and holds no reference to it (a cache keyed
# by model whose values hold the model's bound method would keep every model alive); the compiler guards on the
# model, so each model gets its own graphs, reused by every call of the sampler.
_COMPILED: dict = {}


def _call(model, kwargs: dict):
    return model(**kwargs)


#: Quantisers whose models' decode step compiles although transformers' ``is_compileable`` says no (it guards
#: ``generate``'s own compilation). bitsandbytes nf4 on an H100 (benchmarks/results/gpu_2026-11-24/, the QLoRA probe):
#: the compiled step ran at 166 samples/s against the eager step's 49, and drew the same samples. A failing
#: compilation still falls back to the uncompiled step with a warning (``Decoder.static_logits``).
COMPILES_ANYWAY = frozenset({"Bnb4BitHfQuantizer"})


def can_compile(model) -> str | None:
    """None when ``auto`` compiles this model's decode step, else why not (transformers' auto-compile rule:
    a CUDA device, no quantiser that forbids it, no CPU/disk offload; bitsandbytes 4-bit models compile)."""
    device = next(model.parameters()).device
    if device.type != "cuda":
        return f"the model is on {device.type}, not CUDA"
    quantizer = getattr(model, "hf_quantizer", None)
    name = type(quantizer).__name__
    if quantizer is not None and not getattr(quantizer, "is_compileable", False) and name not in COMPILES_ANYWAY:
        return f"{name} models cannot be compiled"
    devices = set(getattr(model, "hf_device_map", {}).values())
    if "disk" in devices or ("cpu" in devices and len(devices) > 1):
        return "the model is offloaded"
    return None


def resolve_decode(decode: str, model) -> str:
    """``eager``, ``static`` or ``compiled`` for ``decode`` (one of :data:`DECODE_MODES`) on ``model``."""
    if decode not in DECODE_MODES:
        raise ValueError(f"decode must be one of {', '.join(DECODE_MODES)}; got {decode!r}")
    if decode != "auto":
        return decode
    return "eager" if can_compile(model) is not None else "compiled"


def bucket(count: int, slots: int) -> int:
    """The slot count a static step shrinks to with ``count`` live rows: the smallest power of two >= ``count``,
    at least 2, at most ``slots`` (the call's slot count, itself a shape the step already has).

    Not 1: the compiler specialises a dimension of size 1, so a last single row would cost one more compilation."""
    return min(slots, max(2, 1 << max(count - 1, 0).bit_length()))


def compiled_forward(options: dict | None = None):
    """``f(model, kwargs) = model(**kwargs)`` through ``torch.compile`` (``options`` or :data:`COMPILE_OPTIONS`),
    built once per options: a later sampler call reuses the compiled graphs (and, on CUDA, the captured graphs)."""
    options = dict(COMPILE_OPTIONS if options is None else options)
    key = repr(sorted(options.items(), key=lambda item: item[0]))
    if key not in _COMPILED:
        _COMPILED[key] = torch.compile(_call, **options)
    return _COMPILED[key]


class StepInputs:
    """Every slot's next input token and position: host arrays written slot by slot (no device call each), copied
    to two fixed device tensors once a step (:meth:`to_device`)."""

    def __init__(self, slots: int, pad_id: int, device):
        self.device = device
        self.host_tokens = np.full(slots, pad_id, dtype=np.int64)
        self.host_positions = np.zeros(slots, dtype=np.int64)
        self._allocate()

    def _allocate(self) -> None:
        slots = self.host_tokens.shape[0]
        # [slots, 1]: the step's input shape, so the compiled step gets the tensors themselves, not views
        self.tokens = torch.zeros((slots, 1), dtype=torch.long, device=self.device)
        self.positions = torch.zeros((slots, 1), dtype=torch.long, device=self.device)
        for tensor in (self.tokens, self.positions):
            torch._dynamo.mark_static_address(tensor)

    def set(self, slot: int, token: int, position: int) -> None:
        self.host_tokens[slot], self.host_positions[slot] = token, position

    def to_device(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(input_ids, position_ids)``, both ``[slots, 1]``, at the same addresses every step."""
        self.tokens.copy_(torch.from_numpy(self.host_tokens).unsqueeze(1))
        self.positions.copy_(torch.from_numpy(self.host_positions).unsqueeze(1))
        return self.tokens, self.positions

    def select(self, keep: list[int]) -> None:
        """Keep only slots ``keep`` (renumbered ``0..len(keep)-1``), as the cache does in a shrink."""
        self.host_tokens, self.host_positions = self.host_tokens[keep], self.host_positions[keep]
        self._allocate()


def static_shrink_plan(live: list[int], slots: int, start_slots: int) -> list[int] | None:
    """The slots a static step keeps when nothing waits any more: the ``live`` ones plus free ones up to
    :func:`bucket`, or None while that bucket is not below half of ``slots`` (a shrink copies the whole cache)."""
    target = bucket(len(live), start_slots)
    if not live or target > slots // 2:
        return None
    taken = set(live)
    free = [s for s in range(slots) if s not in taken][: target - len(live)]
    return sorted(live + free)
