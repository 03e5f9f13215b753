"""Qwen2.5-Math-PRM without remote code: transformers' own ``Qwen2Model`` plus the hub checkpoint's two-layer head.

The hub class (``Qwen2ForProcessRewardModel`` in ``modeling_qwen2_rm.py``) needs ``trust_remote_code``. Its weights
are a Qwen2 body under ``model.`` and a head ``score = Sequential(Linear(hidden, hidden), ReLU(), Linear(hidden,
2))``, i.e. the tensors ``score.0.weight``, ``score.0.bias``, ``score.2.weight``, ``score.2.bias``.
:class:`Qwen2ProcessRewardModel` declares the same module names, so ``from_pretrained`` puts every tensor, by name,
on the transformers body and on our head (4-bit quantisation and device placement included). The head's tensors are
checked in the safetensors files first: a missing one would otherwise be left at its random initialisation.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from transformers import Qwen2Config, Qwen2Model
from transformers.models.qwen2.modeling_qwen2 import Qwen2PreTrainedModel

from grpo_ext.errors import UserError
from grpo_ext.rewards.weights import safetensors_shapes

__all__ = ["HEAD_TENSORS", "Qwen2ProcessRewardModel", "check_head_tensors"]

#: The head's tensors in the hub checkpoint (``score.1`` is the ReLU).
HEAD_TENSORS = ("score.0.weight", "score.0.bias", "score.2.weight", "score.2.bias")


class Qwen2ProcessRewardModel(Qwen2PreTrainedModel):
    """Qwen2 body + ``score`` head; ``forward`` returns ``(B, T, 2)`` logits, P(good step) = softmax[..., 1]."""

    config_class = Qwen2Config

    def __init__(self, config: Qwen2Config):
        super().__init__(config)
        self.model = Qwen2Model(config)
        self.score = nn.Sequential(
            nn.Linear(config.hidden_size, config.hidden_size), nn.ReLU(), nn.Linear(config.hidden_size, 2)
        )
        self.post_init()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
        return self.score(hidden)


def check_head_tensors(folder: str | Path, hidden_size: int) -> None:
    """Raise, naming the weights file and the tensors, unless the folder holds the whole head in the right shapes."""
    shapes = safetensors_shapes(folder)
    files = sorted({file for _, file in shapes.values()})
    missing = [name for name in HEAD_TENSORS if name not in shapes]
    if missing:
        raise UserError(
            f"qwen_prm: the weights in {Path(folder)} ({', '.join(files)}) have no {', '.join(missing)}: a Qwen PRM "
            "needs the head score.0 (Linear hidden->hidden) and score.2 (Linear hidden->2)"
        )
    expected = {
        "score.0.weight": (hidden_size, hidden_size),
        "score.0.bias": (hidden_size,),
        "score.2.weight": (2, hidden_size),
        "score.2.bias": (2,),
    }
    for name, shape in expected.items():
        if shapes[name][0] != shape:
            raise UserError(
                f"qwen_prm: {name} in {Path(folder) / shapes[name][1]} has shape {list(shapes[name][0])}, "
                f"expected {list(shape)}"
            )
