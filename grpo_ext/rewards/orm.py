"""An outcome reward model (ORM) as a reward function: P(correct) of each whole completion.

The model is an ``AutoModelForSequenceClassification`` with one logit, read at the last token of
``prompt + completion`` (tokenized together, right-padded, as TRL feeds a model reward); its score is
``sigmoid(logit)``. The iterative loop trains such models (``grpo_ext.experiments.iterative.rm_training``) with binary
cross-entropy against the verifier's 0/1 label, so the score is a probability and 0.5 is its threshold.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from grpo_ext.rewards.classifier import load_classifier, right_pad, token_ids
from grpo_ext.tasks.base import completion_text

__all__ = ["RMRewardFunction", "load_outcome_reward_model", "score_outcome"]


def load_outcome_reward_model(path: str | os.PathLike):
    """``(model, tokenizer)`` of a saved outcome RM folder (eval mode)."""
    from transformers import AutoModelForSequenceClassification

    return load_classifier(AutoModelForSequenceClassification, path)


@torch.no_grad()
def score_outcome(model, tokenizer, prompts: Sequence[str], completions: Sequence[str], batch_size: int = 64):
    """P(correct) = sigmoid(logit) per completion, as a float numpy array."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    rows = [token_ids(tokenizer, p + c) for p, c in zip(prompts, completions, strict=True)]
    out = []
    try:
        for start in range(0, len(rows), batch_size):
            batch = right_pad(rows[start : start + batch_size], tokenizer.pad_token_id)
            batch = {k: v.to(device) for k, v in batch.items()}
            out.append(torch.sigmoid(model(**batch, use_cache=False).logits[:, 0].float()).cpu())
    finally:
        model.train(was_training)
    return torch.cat(out).numpy() if out else np.zeros(0, dtype=np.float32)


class RMRewardFunction:
    """An outcome RM as a TRL reward function: ``f(prompts=, completions=, **kw) -> list[float]`` in [0, 1].

    Built from a saved RM folder (``RMRewardFunction(path)``) or a model in memory (``model=, tokenizer=``).
    Prompts and completions are strings (conversational ones use the last message's text).
    """

    def __init__(
        self,
        path: str | os.PathLike | None = None,
        *,
        model=None,
        tokenizer=None,
        batch_size: int = 64,
        name: str | None = None,
    ):
        if path is not None:
            model, tokenizer = load_outcome_reward_model(path)
        if model is None or tokenizer is None:
            raise ValueError("RMRewardFunction needs a reward model folder or both model= and tokenizer=")
        if model.config.num_labels != 1:
            raise ValueError(f"RMRewardFunction needs a one-logit outcome RM, got num_labels={model.config.num_labels}")
        self.model, self.tokenizer, self.batch_size = model.eval(), tokenizer, batch_size
        self.__name__ = name or (f"orm_{Path(path).name}" if path is not None else "orm")

    def __call__(self, prompts: list, completions: list, **kwargs) -> list[float]:
        texts_p = [completion_text(p) for p in prompts]
        texts_c = [completion_text(c) for c in completions]
        return score_outcome(self.model, self.tokenizer, texts_p, texts_c, self.batch_size).tolist()
