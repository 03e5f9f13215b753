"""What a learned reward model (a sequence- or token-classification model) reads, shared by the outcome RM
(:mod:`grpo_ext.rewards.orm`), the process RM (:mod:`grpo_ext.rewards.prm`) and the iterative loop's RM training.

Text is tokenized without special tokens and rows are right-padded, exactly as TRL's GRPOTrainer feeds a model
reward function, so a saved outcome RM also works as ``reward_funcs=[<folder>]``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import torch

__all__ = ["load_classifier", "right_pad", "token_ids", "with_pad_token"]


def token_ids(tokenizer, text: str) -> list[int]:
    """``text``'s ids without special tokens (no BOS/EOS: the RM reads what the policy wrote)."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def with_pad_token(tokenizer):
    """``tokenizer``, its pad token set to EOS when it has none (batches are padded)."""
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def right_pad(rows: Sequence[Sequence[int]], pad_token_id: int) -> dict[str, torch.Tensor]:
    """``input_ids`` and ``attention_mask`` of ``rows`` right-padded to the longest (at least one column)."""
    width = max((len(r) for r in rows), default=0) or 1
    # on the host (filled row by row); callers copy them to the model's device
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long, device="cpu")
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long, device="cpu")
    for i, row in enumerate(rows):
        input_ids[i, : len(row)] = torch.tensor(list(row), dtype=torch.long, device="cpu")
        attention_mask[i, : len(row)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def load_classifier(auto_class, path: str | os.PathLike):
    """``(model, tokenizer)`` of a saved reward-model folder, float32 and in eval mode (safetensors only)."""
    from transformers import AutoTokenizer

    folder = Path(path)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"reward model: no model folder (config.json) at {path}")
    model = auto_class.from_pretrained(folder, use_safetensors=True, dtype=torch.float32).eval()
    return model, with_pad_token(AutoTokenizer.from_pretrained(folder))
