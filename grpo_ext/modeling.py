"""Loading the policy and its tokenizer; `embedded` names the shipped base model."""

from __future__ import annotations

from pathlib import Path

EMBEDDED_MODEL_DIR = Path(__file__).parent / "assets" / "embedded"
EMBEDDED_NAME = "embedded"


def resolve_model_path(name_or_path: str) -> str:
    """`embedded` -> the shipped model folder; an existing local folder -> itself; anything else is a hub id.

    A path that looks local (absolute, or starting with `.`) but does not exist is an error here rather than
    a confusing hub lookup later.
    """
    if name_or_path == EMBEDDED_NAME:
        if not (EMBEDDED_MODEL_DIR / "config.json").is_file():
            raise FileNotFoundError(
                f"the embedded model is missing from {EMBEDDED_MODEL_DIR}; build it with "
                "`python scripts/build_base_model.py`"
            )
        return str(EMBEDDED_MODEL_DIR)
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not (path / "config.json").is_file() and not (path / "adapter_config.json").is_file():
            raise FileNotFoundError(f"model folder {path} has neither config.json nor adapter_config.json")
        return str(path)
    if name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1:
        raise FileNotFoundError(f"model_name_or_path: no such model folder: {name_or_path}")
    return name_or_path


def lora_target_modules_default(model_args) -> None:
    """LoRA on every attention and MLP projection unless the user named modules (PEFT's `all-linear`)."""
    if model_args.use_peft and not model_args.lora_target_modules:
        model_args.lora_target_modules = "all-linear"


def policy_init(model_args, training_args):
    """What `GRPOTrainer(model=...)` needs to build the policy the TRL way: (model id, quantization, PEFT).

    The model is passed as a path so TRL loads it with `model_init_kwargs` (and, at `beta > 0` without PEFT,
    rebuilds the reference from the same path); with PEFT the reference is the adapter-disabled base.
    """
    from trl import get_peft_config, get_quantization_config

    model_id = resolve_model_path(model_args.model_name_or_path)
    model_args.model_name_or_path = model_id
    lora_target_modules_default(model_args)
    init_kwargs = {
        "revision": model_args.model_revision,
        "trust_remote_code": training_args.trust_remote_code,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
    }
    init_kwargs.update(training_args.model_init_kwargs or {})
    training_args.model_init_kwargs = init_kwargs
    return model_id, get_quantization_config(model_args), get_peft_config(model_args)
