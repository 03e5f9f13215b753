"""A tiny random model with a real model's tokenizer and chat template: the study's ``--quick`` rehearsal (and the
tests of the runners on a chat-format task) run every path of the real study on it in minutes, without training the
real model. Its numbers mean nothing; its plumbing is the real one (the BPE tokenizer, the chat template, LoRA, the
prompt lengths of the real task)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["TINY_SHAPE", "tiny_model_like"]

#: The tiny model's shape: small enough that a step on the real task's ~200-token prompts takes well under a second.
TINY_SHAPE = {
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}


def tiny_model_like(source: str | Path, out: str | Path, seed: int = 0) -> Path:
    """A random Llama of :data:`TINY_SHAPE` in ``out`` with ``source``'s tokenizer (its chat template included), a
    plain safetensors folder any loader of the project takes. Kept when ``out`` already holds one (idempotent)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from grpo_ext.models import resolve_model_path

    out = Path(out)
    if (out / "model.safetensors").is_file() and (out / "tokenizer_config.json").is_file():
        return out
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(str(source)))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=4096,  # the 8-shot prompts of the real task are ~500 tokens
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        tie_word_embeddings=True,
        **TINY_SHAPE,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out
