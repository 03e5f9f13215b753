"""The training policy the TRL way (full precision or 4-bit QLoRA), the CPU QLoRA workarounds, memory logging.

Model paths (`embedded`, hub ids, local folders) are resolved in `grpo_ext.model_paths`. Everything goes through TRL's
own `ModelConfig` fields (`load_in_4bit`, `bnb_4bit_quant_type`, `use_bnb_nested_quant`, `use_peft`, `lora_r`,
`lora_alpha`, `lora_target_modules`, ...): `policy_init` turns them into what
`GRPOTrainer(model=<path>, quantization_config=..., peft_config=...)` needs, so TRL loads the model, wraps it with
PEFT and, at `beta > 0`, uses the adapter-disabled base as the reference (no second copy of the weights).

- 4-bit compute dtype: `dtype` when it is bfloat16/float16; otherwise bfloat16 on a GPU that supports it (float16 on
  one that does not) and float32 on CPU. Measured here (bitsandbytes 0.50, 2 cores): on CPU float32 compute is as
  fast as bfloat16 for a GRPO step (forward+backward within noise, generation ~10% faster) and exact, so there is
  no reason to round activations.
- LoRA target modules: PEFT's `all-linear` unless `lora_target_modules` names modules: every attention and MLP
  projection (q/k/v/o, gate/up/down for Llama, Qwen2, Mistral, ...) and never the output layer (`lm_head`).
- bf16 on a CPU (`cpu_bf16`, a `GRPOExtConfig` field; `resolve_cpu_bf16`, called by `policy_init`): the frozen base
  in bfloat16 where the CPU multiplies bf16 natively (`cpu_bf16_support`: `avx512_bf16` / `amx_bf16` / Arm `bf16`),
  float32 elsewhere; PEFT keeps the LoRA weights float32 on a bf16 base (`autocast_adapter_dtype=True`), so AdamW's
  state is float32 too. Measured on SmolLM2-135M (`python -m benchmarks.bf16_numerics`, 8 completions): per-token
  log-probs 0.03 nats from float32's on average, the LoRA gradient's cosine to float32's 0.994 (11% relative error;
  two GRPO minibatches' gradients have a cosine of ~0.01), the sampler's next-token distributions 0.014 apart in
  total variation (the same draw at 95% of positions). TRL's `cast_lm_head_to_fp32` gains little (0.022 nats, cosine
  0.995): the error is the body's, not the head's.
- `compact_log_probs_on_cpu()`: TRL's fused LM head projects only the completion positions on a CPU too (it does on
  CUDA): the same log-probs, a third less real-model step time (`grpo_ext.assembly.build_grpo_trainer` applies it).
- `prepare_quantized_policy(model)` must run on the trained model after TRL built it (GRPOExtTrainer does it):
  on CPU it stops bitsandbytes from repacking 4-bit weights for inference, which silently breaks the backward pass
  of later training steps, and keeps the LoRA weights in float32 (TRL casts them to bfloat16 for QLoRA).
"""

from __future__ import annotations

import importlib.util
import logging

import torch

from grpo_ext.errors import UserError
from grpo_ext.model_paths import resolve_model_path

#: PEFT's name for "every linear layer except the output layer" (attention + MLP projections of any architecture).
ALL_LINEAR = "all-linear"

_LOG = logging.getLogger(__name__)

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def lora_target_modules_default(model_args) -> None:
    """LoRA on every attention and MLP projection unless the user named modules (PEFT's `all-linear`)."""
    if model_args.use_peft and not model_args.lora_target_modules:
        model_args.lora_target_modules = ALL_LINEAR


def on_gpu(training_args=None) -> bool:
    """Whether training runs on a CUDA device (not when `use_cpu` is set)."""
    if training_args is not None and getattr(training_args, "use_cpu", False):
        return False
    return torch.cuda.is_available()


#: /proc/cpuinfo flags that mean the CPU multiplies bf16 natively (x86: AVX512-BF16, AMX; Arm: FEAT_BF16).
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")


def _cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux lists them (``flags`` on x86, ``Features`` on Arm); empty elsewhere."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return set(value.split())
    except OSError:
        pass
    return set()


def cpu_bf16_support() -> dict:
    """Whether this CPU computes in bf16 natively: ``{"supported", "flags", "mkldnn_bf16"}``.

    ``supported`` needs one of :data:`BF16_CPU_FLAGS` in ``/proc/cpuinfo``: there oneDNN multiplies bf16 matrices with
    bf16 instructions (measured on an AMD EPYC with ``avx512_bf16``: 4.7x float32 for a 4096x576 @ 576x1536 matmul, one
    thread; on an AMD EPYC without AVX-512, 1/6 of float32). ``torch.ops.mkldnn._is_mkldnn_bf16_supported()`` is
    recorded beside it but does not decide: it is also true on AVX512 CPUs without bf16 instructions, where bf16 is
    emulated (converted to float32 and back) and slower.
    """
    flags = sorted(_cpu_flags() & set(BF16_CPU_FLAGS))
    try:
        mkldnn = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch build without oneDNN
        mkldnn = False
    return {"supported": bool(flags), "flags": flags, "mkldnn_bf16": mkldnn}


def _say(message: str, level: int = logging.INFO) -> None:
    """Log ``message``, or print it when the level is not enabled (scripts run at Python's default WARNING level)."""
    if _LOG.isEnabledFor(level):
        _LOG.log(level, message)
    else:
        print(message, flush=True)


def resolve_cpu_bf16(model_args, training_args) -> str | None:
    """Apply `cpu_bf16` (a `GRPOExtConfig` field): the base weights' dtype on a CPU, set in ``model_args.dtype`` (so
    the run's record says what ran) and returned; says in the log what was chosen and why.

    `off` (or a config without the field, or a GPU run) leaves `dtype` as given (a warning for bfloat16 on a CPU
    without native bf16, where it is emulated and slow). `auto`: bfloat16 where
    :func:`cpu_bf16_support` finds native bf16, else float32. `on`: bfloat16 (a warning where it is emulated). Only
    for a LoRA policy on a full-precision base: a `UserError` naming the field otherwise.
    """
    mode = getattr(training_args, "cpu_bf16", "off")
    if mode == "off":
        if model_args.dtype == "bfloat16" and not on_gpu(training_args) and not cpu_bf16_support()["supported"]:
            # kept as given (a study compares arms in one arithmetic), but said: measured on an AMD EPYC without
            # AVX-512, a bf16 matmul ran at 1/6 of float32's and a real-model GRPO step took 220 s instead of ~30
            _LOG.warning(
                "dtype: bfloat16 on a CPU without native bf16 (none of %s in /proc/cpuinfo): bf16 is emulated here, "
                "several times slower than float32 (cpu_bf16: auto picks float32 on such a CPU)",
                ", ".join(BF16_CPU_FLAGS),
            )
        return model_args.dtype
    if on_gpu(training_args):
        _say(f"cpu_bf16: `{mode}` is for CPU training and is ignored on a GPU; dtype {model_args.dtype} as given")
        return model_args.dtype
    if model_args.load_in_4bit or model_args.load_in_8bit:
        flag = "load_in_4bit" if model_args.load_in_4bit else "load_in_8bit"
        raise UserError(
            f"cpu_bf16: `{mode}` sets the dtype of full-precision base weights; with {flag} the base is quantised "
            "(its compute dtype follows dtype): set cpu_bf16: off"
        )
    if not model_args.use_peft:
        raise UserError(
            f"cpu_bf16: `{mode}` needs use_peft: true (LoRA): a full fine-tune would train bf16 weights with bf16 "
            "optimizer state"
        )
    support = cpu_bf16_support()
    found = ", ".join(support["flags"]) or f"none of {', '.join(BF16_CPU_FLAGS)} in /proc/cpuinfo"
    chosen = "bfloat16" if mode == "on" or support["supported"] else "float32"
    where = "this CPU has native bf16" if support["supported"] else "no native bf16 on this CPU"
    _say(
        f"cpu_bf16: {mode}: {where} ({found}): base weights in {chosen}, LoRA weights and optimizer state in float32"
        + (f" (dtype {model_args.dtype} replaced)" if model_args.dtype != chosen else ""),
        logging.WARNING if mode == "on" and not support["supported"] else logging.INFO,
    )
    if mode == "on" and not support["supported"]:
        _LOG.warning("cpu_bf16: on: bf16 is emulated on this CPU and usually slower than float32 (cpu_bf16: auto)")
    model_args.dtype = chosen
    return chosen


#: Whether TRL's fused LM head scores only the completion positions on a CPU once :func:`compact_log_probs_on_cpu`
#: has run (read at every forward: benchmarks/real_step.py turns it off to time TRL's own CPU path beside it).
CPU_COMPACT_LOG_PROBS = True


def compact_log_probs_on_cpu() -> bool:
    """Make TRL's fused LM head score only the positions that have a label on a CPU, as it does on Triton devices.

    TRL 1.16 computes the per-token log-probs of the loss with `add_fused_lm_head`: the LM head projects, in tiles,
    the positions whose label is not -100 (the completion tokens) when `_use_triton(device)` is true (CUDA/XPU), and
    every position of the batch elsewhere (so that compiled devices like Neuron keep fixed shapes), masking the prompt's
    afterwards. On a CPU that is the whole prompt through the 49k-token head, forward and backward: measured on
    SmolLM2-135M (one thread, 8 rows of ~225 tokens, 64 of them completion), 11.5 s of fp32 head per micro-batch
    against ~2 s for the completion positions alone, about a third of the real-model step. The log-probs and their
    gradients are the same either way (the masked positions are zeros in both): only which rows are multiplied
    changes. TRL's private `trl.trainer.utils._use_triton` is wrapped to say "compact" for CPU tensors (the kernel
    itself still picks its torch path on a CPU: it reads its own module's `_use_triton`). Returns whether the wrapper
    is in place; False, with a warning, for a TRL without that function (then nothing changes).
    """
    try:
        import trl.trainer.utils as trl_utils
    except ImportError:
        return False
    original = getattr(trl_utils, "_use_triton", None)
    if original is None:
        _LOG.warning("TRL's fused LM head has changed (no trl.trainer.utils._use_triton): CPU log-probs not compacted")
        return False
    if getattr(original, "grpo_ext_cpu_compact", False):
        return True

    def use_compact(device) -> bool:
        return (CPU_COMPACT_LOG_PROBS and torch.device(device).type == "cpu") or original(device)

    use_compact.grpo_ext_cpu_compact = True
    use_compact.__wrapped__ = original
    trl_utils._use_triton = use_compact
    return True


def quant_compute_dtype(model_args, training_args=None) -> torch.dtype:
    """The dtype 4-bit layers compute in: `dtype` if half, else bf16 on GPU (fp16 if no bf16 support), fp32 on CPU."""
    requested = _DTYPES.get(model_args.dtype) if isinstance(model_args.dtype, str) else model_args.dtype
    if requested in (torch.bfloat16, torch.float16):
        return requested
    if on_gpu(training_args):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def quantization_config(model_args, training_args=None):
    """`transformers.BitsAndBytesConfig` from TRL's `ModelConfig` fields (None for a full-precision load)."""
    from transformers import BitsAndBytesConfig

    if model_args.load_in_4bit:
        return BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type=model_args.bnb_4bit_quant_type,
            bnb_4bit_use_double_quant=model_args.use_bnb_nested_quant,
            bnb_4bit_compute_dtype=quant_compute_dtype(model_args, training_args),
            bnb_4bit_quant_storage=model_args.bnb_4bit_quant_storage,
        )
    if model_args.load_in_8bit:
        return BitsAndBytesConfig(load_in_8bit=True)
    return None


#: The `ModelConfig` fields that decide how a quantised base is loaded (what `quantization_config` reads).
QUANTIZATION_FIELDS = (
    "load_in_4bit",
    "load_in_8bit",
    "bnb_4bit_quant_type",
    "use_bnb_nested_quant",
    "bnb_4bit_quant_storage",
    "dtype",
)


def trained_quantization(checkpoint_dir):
    """How an adapter's base was quantised when it was trained: TRL's `ModelConfig` with the bitsandbytes fields of
    the run's record (`grpo_ext_config.yaml`), or None (a full-precision base, or no record: a PEFT adapter from
    elsewhere). A QLoRA adapter learns on the quantised base, rounding error included, so it is scored on that."""
    from trl import ModelConfig

    from grpo_ext.run_record import resolved_config

    model = (resolved_config(checkpoint_dir) or {}).get("model") or {}
    if not isinstance(model, dict) or not (model.get("load_in_4bit") or model.get("load_in_8bit")):
        return None
    fields = {name: model[name] for name in QUANTIZATION_FIELDS if model.get(name) is not None}
    return ModelConfig(model_name_or_path=str(checkpoint_dir), **fields)


def check_model_args(model_args) -> None:
    """Combinations TRL would accept and then fail on (or train nothing with): a `UserError` naming the field."""
    if (model_args.load_in_4bit or model_args.load_in_8bit) and not model_args.use_peft:
        flag = "load_in_4bit" if model_args.load_in_4bit else "load_in_8bit"
        raise UserError(f"{flag}: quantised weights cannot be trained directly; set use_peft: true (LoRA adapters)")
    if model_args.use_peft and model_args.lora_r < 1:
        raise UserError(f"lora_r: must be >= 1, got {model_args.lora_r}")


def policy_init(model_args, training_args):
    """What `GRPOTrainer(model=...)` needs to build the policy the TRL way: (model id, quantization, PEFT).

    The model is passed as a path so TRL loads it with `model_init_kwargs` (and, at `beta > 0` without PEFT,
    rebuilds the reference from the same path); with PEFT the reference is the adapter-disabled base.
    With `use_vllm` and no `vllm` installed, generation falls back to transformers (with a warning).
    """
    from trl import get_peft_config

    check_model_args(model_args)
    resolve_cpu_bf16(model_args, training_args)
    model_id = resolve_model_path(model_args.model_name_or_path)
    model_args.model_name_or_path = model_id
    lora_target_modules_default(model_args)
    init_kwargs = {
        "revision": model_args.model_revision,
        "trust_remote_code": training_args.trust_remote_code,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
        "use_safetensors": True,  # never unpickle weights
    }
    if getattr(training_args, "use_cpu", False) and (model_args.load_in_4bit or model_args.load_in_8bit):
        init_kwargs["device_map"] = {"": "cpu"}  # bitsandbytes would put the weights on a visible GPU otherwise
    init_kwargs.update(training_args.model_init_kwargs or {})
    training_args.model_init_kwargs = init_kwargs
    if getattr(training_args, "use_vllm", False) and importlib.util.find_spec("vllm") is None:
        _LOG.warning("use_vllm: vllm is not installed; generating with transformers instead")
        training_args.use_vllm = False
    return model_id, quantization_config(model_args, training_args), get_peft_config(model_args)


# ---- the loaded policy ------------------------------------------------------------------------------------------


def _linear4bit_modules(model):
    try:
        import bitsandbytes as bnb
    except ImportError:
        return []
    return [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]


def release_checkpoint_mapping(model) -> int:
    """Give every parameter and buffer that is not a packed 4-bit weight its own memory; returns the bytes copied.

    `from_pretrained` leaves the tensors it does not quantise (embeddings, norms, biases) as views of the memory-mapped
    checkpoint. While any of them lives the whole mapping stays open, and every page of the full-precision linear
    weights read during quantisation stays in the process's resident set (measured: ~420 MiB for a Qwen2.5-0.5B shape,
    about as much as the 4-bit model itself). Copying the few unquantised tensors lets the mapping close.
    """
    import bitsandbytes as bnb

    copied, seen = 0, set()
    for module in model.modules():
        for param in module.parameters(recurse=False):
            if id(param) in seen or isinstance(param, bnb.nn.Params4bit):
                continue
            seen.add(id(param))
            param.data = param.data.clone()
            copied += param.numel() * param.element_size()
        for name, buffer in list(module.named_buffers(recurse=False)):
            if buffer is not None and id(buffer) not in seen:
                seen.add(id(buffer))
                module._buffers[name] = buffer.clone()
                copied += buffer.numel() * buffer.element_size()
    return copied


def prepare_quantized_policy(model, keep_fp32_adapters: bool | None = None) -> dict:
    """Make a 4-bit policy safe and exact to train on CPU; a no-op for full-precision models. Returns what it changed.

    - bitsandbytes repacks a 4-bit weight for its AVX512-BF16 inference kernel the first time the layer runs in eval
      mode without grad (an evaluation, a callback sampling from the policy). The repacked layer's output is then
      detached from its input in training mode, so every later backward pass silently drops the gradient through
      the base layers (measured: LoRA gradients of all but the last layer ~100% wrong). Packing is turned off.
    - TRL casts the trainable LoRA weights of a quantised model to bfloat16 (the QLoRA paper's GPU recipe). When
      the 4-bit layers compute in float32 (CPU), bf16 adapters only round the updates away and slow generation down,
      so they go back to float32 (`keep_fp32_adapters`; default: when the compute dtype is float32).

    Call it after the trainer wrapped the model and before the optimizer exists (GRPOExtTrainer.__init__).
    """
    layers = _linear4bit_modules(model)
    changed = {"packing_disabled": 0, "adapters_to_fp32": 0, "bytes_released_from_checkpoint_mapping": 0}
    if not layers:
        return changed
    changed["bytes_released_from_checkpoint_mapping"] = release_checkpoint_mapping(model)
    for layer in layers:
        if getattr(layer, "support_avx512bf16_for_cpu", False):
            layer.support_avx512bf16_for_cpu = False
            changed["packing_disabled"] += 1
    if keep_fp32_adapters is None:
        keep_fp32_adapters = all(getattr(layer, "compute_dtype", None) == torch.float32 for layer in layers)
    if keep_fp32_adapters:
        for param in model.parameters():
            if param.requires_grad and param.dtype in (torch.bfloat16, torch.float16):
                param.data = param.data.float()
                changed["adapters_to_fp32"] += 1
    return changed
