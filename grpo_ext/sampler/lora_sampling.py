"""PEFT LoRA layers while the sampler decodes: :class:`LoraSampling` computes each adapter's product in the base
weights' dtype for one forward pass at a time (``lora: base_dtype``, the default), or leaves PEFT's forward (``peft``).

The decode loop (:mod:`grpo_ext.sampler.decoder`) switches the layers on around each of its forwards; the sampling
parameters (:mod:`grpo_ext.sampler.sampling`) check ``lora`` against :data:`LORA_MODES`. Kept apart from the loop:
this is the numerics of one kind of layer (which PEFT layers qualify, what the cast changes, when the cast copies are
stale), the loop is the bookkeeping of slots and rows.
"""

from __future__ import annotations

import contextlib
import sys

import torch

#: ``base_dtype``: the adapter's product in the base weights' dtype (:class:`LoraSampling`); ``peft``: PEFT's forward.
LORA_MODES = ("base_dtype", "peft")


def _lora_linear_class():
    """PEFT's ``lora.Linear`` if PEFT is loaded (a PEFT model cannot exist without it), else None."""
    module = sys.modules.get("peft.tuners.lora.layer")
    return getattr(module, "Linear", None)


def _plain_adapters(layer) -> list[str] | None:
    """The active adapters of a PEFT ``lora.Linear`` whose forward is ``base(x) + sum_a scaling_a * B_a A_a x``
    on a plain ``nn.Linear`` (what :class:`LoraSampling` computes), or None: merged or disabled adapters, variants
    (DoRA, ...), LoRA biases, a dropout that is live, transposed (Conv1D) weights, PEFT's input cast turned off."""
    if layer.merged or layer.disable_adapters or getattr(layer, "fan_in_fan_out", False):
        return None
    if type(layer.base_layer) is not torch.nn.Linear or not getattr(layer, "cast_input_dtype_enabled", True):
        return None
    active = [a for a in layer.active_adapters if a in layer.lora_A]
    for a in active:
        dropout = layer.lora_dropout[a]
        if a in getattr(layer, "lora_variant", {}) or getattr(layer, "lora_bias", {}).get(a, False):
            return None
        if dropout.training and not isinstance(dropout, torch.nn.Identity) and getattr(dropout, "p", 0) > 0:
            return None
    return active or None


class LoraSampling:
    """The PEFT LoRA layers of ``model`` whose forward the sampler replaces while it decodes (none for a model without
    them, or with ``mode`` ``peft``); :meth:`active` switches them for one forward pass.

    PEFT's ``lora.Linear`` computes ``base(x) + lora_B(lora_A(dropout(x))) * scaling``, casting ``x`` to the adapter's
    dtype and the sum back. Beside a bf16 base (`cpu_bf16` training, the study's `dtype: bfloat16` evaluations) the
    adapter is float32 (PEFT's ``autocast_adapter_dtype``), so each projection of each step runs about ten small ops
    beside the base's matmul, and on a CPU a small matmul costs ~30 us whatever its size: a SmolLM2-135M decode step
    at 64 rows (one thread) took 0.73x the base's rate. Here ``A`` and ``scaling * B`` are cast to the base weight's
    dtype once a call (concatenated over the active adapters: their products sum) and, on a CPU, the base's product
    and the adapter's are one matmul, ``[x, x A^T] @ [W, scaling B]^T`` (a copy of the weights while sampling, as a
    merge into a bf16 copy would take): 0.87x. Elsewhere ``x A^T`` is added into the base's output (``addmm``).

    What it changes in the numbers: ``A``, ``scaling * B`` and ``x A^T`` are rounded to the base's dtype (a float32
    base: nothing is, only the order of float32 additions moves). The output is rounded to that dtype by PEFT too, and
    the adapter's share of it is small, so the change is below the bf16 base's own rounding (tests/sampler/
    test_lora_sampling.py; ``benchmarks/lora_sampling.py`` on the real model: per-token log-probs, paired pass@1). The
    update is kept whole, which a merge into bf16 weights does not do: most entries of a short run's update are
    below half a bf16 step of their weight and round away (an SFT adapter of the real study: 58% of the weights
    unchanged by the merge, the merged update 58% off in norm).

    Why only for one pass at a time: the trainer's forward and backward passes, and anything that runs the model
    between two of the sampler's steps, see PEFT's own layers (gradients flow to the adapter there). The cast copies
    are built again when an adapter weight changed in place since (its version counter): an optimizer step between two
    generation rounds is never sampled stale.
    """

    def __init__(self, model, mode: str = "base_dtype"):
        if mode not in LORA_MODES:
            raise ValueError(f"lora: expected one of {', '.join(LORA_MODES)}, got {mode!r}")
        cls = _lora_linear_class()
        self.layers: list[tuple[torch.nn.Module, list[str]]] = []
        if mode == "base_dtype" and cls is not None:
            for module in model.modules():
                if type(module) is cls:
                    adapters = _plain_adapters(module)
                    if adapters is not None:
                        self.layers.append((module, adapters))
        # id(layer) -> (the adapter weights' versions and ids, the forward computing with their cast copies)
        self._forwards: dict[int, tuple[tuple[int, ...], object]] = {}

    def _forward(self, layer, adapters: list[str]):
        """The layer's sampling forward, with ``A`` (``[r, in]``) and ``scaling * B`` (``[out, r]``) of the active
        adapters concatenated along the rank (their products sum) and cast to the base weight's dtype; built again
        only when an adapter weight changed in place (or was replaced) since."""
        params = [p for n in adapters for p in (layer.lora_A[n].weight, layer.lora_B[n].weight)]
        versions = tuple(p._version for p in params) + tuple(id(p) for p in params)
        cached = self._forwards.get(id(layer))
        if cached is not None and cached[0] == versions:
            return cached[1]
        weight = layer.base_layer.weight
        # scaling is applied in the adapter's own dtype (float32), then one rounding to the base's
        a = torch.cat([layer.lora_A[n].weight for n in adapters], dim=0).to(weight.dtype)
        b = torch.cat([layer.lora_B[n].weight * layer.scaling[n] for n in adapters], dim=1).to(weight.dtype)
        base, original, bias = layer.base_layer, type(layer).forward.__get__(layer), layer.base_layer.bias
        joined = None
        if weight.device.type == "cpu":
            # On a CPU each small matmul costs a fixed ~30 us whatever its size: [x, x A^T] @ [W, s B]^T is the base's
            # product and the adapter's in one (K = in + r), at the price of a copy of the weight while sampling
            joined = torch.cat([weight, b], dim=1)

        def forward(x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
            if args or kwargs or x.dtype != a.dtype:  # mixed-adapter batches and the like: PEFT's own forward
                return original(x, *args, **kwargs)
            low = torch.nn.functional.linear(x, a)
            if joined is not None:
                return torch.nn.functional.linear(torch.cat([x, low], dim=-1), joined, bias)
            out = base(x)
            rows = out.reshape(-1, out.shape[-1])
            low = low.reshape(rows.shape[0], -1)
            if torch.is_grad_enabled() or rows.dtype != b.dtype:  # the sampler runs without grad: in place there
                return torch.addmm(rows.to(b.dtype), low, b.t()).to(out.dtype).view(out.shape)
            return rows.addmm_(low, b.t()).view(out.shape)

        self._forwards[id(layer)] = (versions, forward)
        return forward

    @contextlib.contextmanager
    def active(self):
        """Within the block the layers compute with the cast product; PEFT's forward is back after it."""
        if not self.layers:
            yield
            return
        for layer, adapters in self.layers:
            # an instance attribute shadows the class's forward (nn.Module.__call__ reads self.forward)
            layer.forward = self._forward(layer, adapters)
        try:
            yield
        finally:
            for layer, _ in self.layers:
                layer.__dict__.pop("forward", None)
