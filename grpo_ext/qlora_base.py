"""The base loaded the way ``configs/qlora.yaml`` trains on it: the reading a QLoRA adapter was trained against,
shared by the base builder (``scripts/build_base_model.py`` scores it) and the 4-bit diagnostic
(``scripts/qlora_4bit_eval.py``). Floor 3: above :mod:`grpo_ext.policy_loading`."""

from __future__ import annotations

from pathlib import Path

__all__ = ["load_as_main_job"]


def load_as_main_job(folder: str | Path):
    """The base as configs/qlora.yaml loads it: 4-bit nf4 with double quantisation, fp32 compute on CPU, and
    bitsandbytes' CPU inference repack off (`prepare_quantized_policy`, as the trainer does)."""
    from transformers import LlamaForCausalLM
    from trl import ModelConfig

    from grpo_ext.policy_loading import prepare_quantized_policy, quantization_config

    model_args = ModelConfig(
        model_name_or_path=str(folder), load_in_4bit=True, bnb_4bit_quant_type="nf4", use_bnb_nested_quant=True
    )
    model = LlamaForCausalLM.from_pretrained(folder, quantization_config=quantization_config(model_args))
    prepare_quantized_policy(model)
    return model
