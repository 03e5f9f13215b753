"""The loaded policy's memory footprint, logged at start next to a full-precision load of the same base (computed on
the meta device, nothing loaded), with the 4-bit quantisation state that `get_memory_footprint` leaves out."""

from __future__ import annotations

import copy
import logging

import torch

from grpo_ext.policy_loading import _linear4bit_modules

__all__ = ["full_precision_footprint", "log_memory_footprint", "quant_state_bytes"]

_LOG = logging.getLogger(__name__)


def _base_config(model, model_id: str | None):
    config = getattr(model, "config", None)
    if config is None and model_id is not None:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(model_id)
    return config


def full_precision_footprint(config) -> dict:
    """Parameters and bytes of `config`'s causal LM in fp32 and bf16, computed on the meta device (nothing loaded).

    Shared (tied) weights count once; buffers (e.g. rotary frequencies) count at their own dtype.
    """
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    n_params = sum(p.numel() for p in model.parameters())
    buffer_bytes = sum(b.numel() * b.element_size() for b in model.buffers())
    return {
        "parameters": n_params,
        "float32": n_params * 4 + buffer_bytes,
        "bfloat16": n_params * 2 + buffer_bytes,
    }


def quant_state_bytes(model) -> int:
    """Bytes of the 4-bit quantisation state (absmax, nested absmax, codebooks) that `get_memory_footprint` omits."""
    total = 0
    for layer in _linear4bit_modules(model):
        state = getattr(layer.weight, "quant_state", None)
        if state is None:
            continue
        for value in state.as_dict(packed=True).values():
            if isinstance(value, torch.Tensor):
                total += value.numel() * value.element_size()
    return total


def _mb(n: int | float | None) -> str:
    return "?" if n is None else f"{n / 2**20:,.2f} MiB"


def log_memory_footprint(model, model_id: str | None = None, logger: logging.Logger | None = None) -> dict:
    """Log (and return) the loaded policy's memory footprint next to a full-precision load of the same base.

    `loaded_bytes`: `model.get_memory_footprint()` (parameters and buffers as loaded, LoRA weights included; for a
    PEFT model, of the wrapped model); `quant_state_bytes`: the 4-bit quantisation state it leaves out;
    `full_precision`: `{parameters, float32, bfloat16}` from the config on the meta device (not loaded).
    Logged at INFO through `logger` (default: this module's), or printed when that level is not enabled.
    """
    log = logger or _LOG
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = _base_config(inner, model_id)
    try:
        full = full_precision_footprint(config)
    except Exception as err:  # an architecture AutoModelForCausalLM cannot build: still log what was loaded
        log.warning("memory footprint: no full-precision estimate for %s (%s)", model_id, err)
        full = None
    quant = getattr(config, "quantization_config", None)
    if getattr(inner, "is_loaded_in_4bit", False):
        q = quant.to_dict() if hasattr(quant, "to_dict") else dict(quant or {})
        nested = " + double quant" if q.get("bnb_4bit_use_double_quant") else ""
        loaded_as = f"4-bit {q.get('bnb_4bit_quant_type', 'nf4')}{nested}"
    elif getattr(inner, "is_loaded_in_8bit", False):
        loaded_as = "8-bit"
    else:
        loaded_as = str(getattr(inner, "dtype", "")).replace("torch.", "")
    info = {
        "model": model_id or getattr(config, "_name_or_path", None),
        "loaded_as": loaded_as,
        "loaded_bytes": int(inner.get_memory_footprint()),
        "quant_state_bytes": quant_state_bytes(inner),
        "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "full_precision": full,
    }
    full_text = (
        f"full precision would be {_mb(full['float32'])} fp32 / {_mb(full['bfloat16'])} bf16 "
        f"({full['parameters'] / 1e6:,.2f} M parameters)"
        if full
        else "no full-precision estimate"
    )
    state = f" + {_mb(info['quant_state_bytes'])} quantisation state" if info["quant_state_bytes"] else ""
    message = (
        f"policy memory footprint: {_mb(info['loaded_bytes'])} loaded as {loaded_as}{state} "
        f"({info['trainable_parameters']:,} trainable parameters); {full_text}"
    )
    if log.isEnabledFor(logging.INFO):
        log.info(message)
    else:  # scripts run with Python's default WARNING level: the footprint is still shown at start
        print(message, flush=True)
    return info
