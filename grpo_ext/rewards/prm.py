"""A process reward model (TRL's PRM format) as a process reward function: scores at step-end tokens.

TRL's PRMTrainer labels the last token of each step (where the separator is) of `prompt + completion`; this
wrapper reads the model there: P(label 1) for a two-label head, sigmoid for a one-logit head.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForTokenClassification, AutoTokenizer

from grpo_ext.steps import step_end_token_indices


class ProcessRewardModel:
    """Callable with TRL's reward signature returning one score in [0, 1] per step of each completion."""

    def __init__(self, path: str, step_separator: str, batch_size: int = 16, trust_remote_code: bool = False):
        folder = Path(path)
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(f"process_reward_model: no model folder (config.json) at {path}")
        self.model = AutoModelForTokenClassification.from_pretrained(
            folder, use_safetensors=True, trust_remote_code=trust_remote_code
        ).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)
        self.step_separator, self.batch_size = step_separator, batch_size
        self.__name__ = f"prm_{folder.name}"

    def _scores(self, logits: torch.Tensor) -> torch.Tensor:
        if logits.shape[-1] == 1:
            return torch.sigmoid(logits[..., 0])
        return torch.softmax(logits.float(), dim=-1)[..., 1]

    @torch.no_grad()
    def __call__(self, prompts: list, completions: list, **kwargs) -> list[list[float]]:
        device = next(self.model.parameters()).device
        out: list[list[float]] = []
        for start in range(0, len(prompts), self.batch_size):
            rows, positions = [], []
            for prompt, completion in zip(
                prompts[start : start + self.batch_size], completions[start : start + self.batch_size], strict=True
            ):
                prompt_ids = self.tokenizer(prompt, add_special_tokens=False).input_ids
                completion_ids = self.tokenizer(completion, add_special_tokens=False).input_ids
                ends = step_end_token_indices(self.tokenizer, completion_ids, self.step_separator)
                rows.append(prompt_ids + completion_ids)
                positions.append([len(prompt_ids) + e for e in ends])
            width = max(len(r) for r in rows) or 1
            pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
            input_ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows], device=device)
            attention_mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], device=device)
            scores = self._scores(self.model(input_ids=input_ids, attention_mask=attention_mask).logits)
            out.extend([scores[i, p].tolist() for i, p in enumerate(positions)])
        return out
