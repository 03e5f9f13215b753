"""A process reward model (PRM) as a process reward source: one score in [0, 1] per reasoning step.

The format is TRL's (``PRMTrainer``): a token-classification model reads ``prompt + completion`` (each tokenized
without special tokens) and is labelled at the last token of each step. A step's score is P(label 1) there:
the softmax of a two-label head, or the sigmoid of a one-logit head. Steps and their last tokens come from
:mod:`grpo_ext.steps`, as the trainer finds them; :func:`step_end_positions` is also where the iterative loop's
PRM training puts its labels, so labels and scores sit on the same tokens.

:class:`ProcessRewardModel` is the one scoring path: the trainer builds it from ``process_reward_model`` (a
folder), the iterative loop from a model in memory.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from grpo_ext.rewards.classifier import right_pad, token_ids
from grpo_ext.steps import step_end_token_indices

__all__ = ["PRMOutcomeReward", "ProcessRewardModel", "step_end_positions", "step_scores"]


def step_end_positions(tokenizer, prompt: str, completion: str, step_separator: str) -> tuple[list[int], list[int]]:
    """``(input_ids, ends)``: the ids of prompt + completion and the index in them of each step's last token."""
    prompt_ids = token_ids(tokenizer, prompt)
    completion_ids = token_ids(tokenizer, completion)
    ends = step_end_token_indices(tokenizer, completion_ids, step_separator)
    return prompt_ids + completion_ids, [len(prompt_ids) + e for e in ends]


def step_scores(logits: torch.Tensor) -> torch.Tensor:
    """``(B, T, labels)`` token-classification logits -> ``(B, T)`` P(good step) at every token."""
    logits = logits.float()
    if logits.shape[-1] == 1:
        return torch.sigmoid(logits[..., 0])
    return torch.softmax(logits, dim=-1)[..., 1]


class ProcessRewardModel:
    """Callable with TRL's reward signature returning one score in [0, 1] per step of each completion.

    Built from a saved folder (``ProcessRewardModel(path, step_separator)``) or a model in memory
    (``ProcessRewardModel(step_separator=..., model=, tokenizer=)``).
    """

    def __init__(
        self,
        path: str | os.PathLike | None = None,
        step_separator: str | None = None,
        batch_size: int = 16,
        trust_remote_code: bool = False,
        *,
        model=None,
        tokenizer=None,
    ):
        if path is not None:
            from transformers import AutoModelForTokenClassification, AutoTokenizer

            folder = Path(path)
            if not (folder / "config.json").is_file():
                raise FileNotFoundError(f"process_reward_model: no model folder (config.json) at {path}")
            model = AutoModelForTokenClassification.from_pretrained(
                folder, use_safetensors=True, trust_remote_code=trust_remote_code
            )
            tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)
        if model is None or tokenizer is None:
            raise ValueError("ProcessRewardModel needs a model folder or both model= and tokenizer=")
        if not step_separator:
            raise ValueError("ProcessRewardModel needs a step_separator")
        self.model, self.tokenizer = model.eval(), tokenizer
        self.step_separator, self.batch_size = step_separator, batch_size
        self.__name__ = f"prm_{Path(path).name}" if path is not None else "prm"

    @torch.no_grad()
    def __call__(self, prompts: list, completions: list, **kwargs) -> list[list[float]]:
        device = next(self.model.parameters()).device
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        encoded = [
            step_end_positions(self.tokenizer, p, c, self.step_separator)
            for p, c in zip(prompts, completions, strict=True)
        ]
        out: list[list[float]] = []
        for start in range(0, len(encoded), self.batch_size):
            chunk = encoded[start : start + self.batch_size]
            batch = {k: v.to(device) for k, v in right_pad([ids for ids, _ in chunk], pad).items()}
            scores = step_scores(self.model(**batch).logits)
            out.extend(scores[i, ends].tolist() for i, (_, ends) in enumerate(chunk))
        return out


class PRMOutcomeReward:
    """A process RM's verdict on a whole completion: the minimum of its step scores (0 with no steps).

    GRPOTrainer needs at least one outcome reward function; in process mode this one logs what the PRM thinks
    of whole solutions (the advantages come from the step scores).
    """

    def __init__(self, prm):
        self.prm = prm
        self.__name__ = f"{getattr(prm, '__name__', 'prm')}_min"

    def __call__(self, prompts: list, completions: list, **kwargs) -> list[float]:
        return [min(steps) if steps else 0.0 for steps in self.prm(prompts=prompts, completions=completions, **kwargs)]
