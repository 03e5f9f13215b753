"""A process reward model (PRM) as a process reward source: one score in [0, 1] per reasoning step.

:func:`load_process_reward_model` loads a PRM folder in any of :data:`PRM_FORMATS` (detected from its config.json
when not given) as a callable with TRL's reward signature:

- ``token_classification``: TRL's PRM format (``PRMTrainer``), :class:`ProcessRewardModel` below. A
  token-classification model reads ``prompt + completion`` (each tokenized without special tokens) and is labelled
  at the last token of each step. A step's score is P(label 1) there: the softmax of a two-label head, or the
  sigmoid of a one-logit head. Steps and their last tokens come from :mod:`grpo_ext.steps`, as the trainer finds
  them; :func:`step_end_positions` is also where the iterative loop's PRM training puts its labels, so labels and
  scores sit on the same tokens.
- ``step_tag`` (Math-Shepherd) and ``qwen_prm`` (Qwen2.5-Math-PRM): :mod:`grpo_ext.rewards.prm_formats`; the steps
  are re-joined in the PRM's own input format and each tag's score maps back to the policy's step.

:func:`process_reward_model_from_config` is what the trainer builds from ``process_reward_model`` and its
``process_reward_model_*`` fields, on the process's device. The iterative loop builds :class:`ProcessRewardModel`
from a model in memory.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import torch

from grpo_ext.errors import UserError
from grpo_ext.rewards.classifier import right_pad, token_ids
from grpo_ext.rewards.prm_formats import (
    STEP_TAG_DEFAULTS,
    check_batch_size,
    load_qwen_prm,
    load_step_tag_prm,
    load_whole,
    model_load_kwargs,
)
from grpo_ext.rewards.weights import require_safetensors, reward_model_folder
from grpo_ext.steps import step_end_token_indices
from grpo_ext.tasks.base import completion_text

__all__ = [
    "PRM_FORMATS",
    "PRMOutcomeReward",
    "ProcessRewardModel",
    "detect_prm_format",
    "load_process_reward_model",
    "process_reward_model_from_config",
    "step_end_positions",
    "step_scores",
]

PRM_FORMATS = ("token_classification", "step_tag", "qwen_prm")
# Options every format takes, then each format's own (load_process_reward_model's **format_kwargs).
COMMON_OPTIONS = ("step_separator", "batch_size", "device", "dtype", "load_in_4bit")
FORMAT_OPTIONS = {"token_classification": (), "step_tag": tuple(STEP_TAG_DEFAULTS), "qwen_prm": ("system_prompt",)}


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

    Built from a saved folder (``ProcessRewardModel(path, step_separator)``; ``device``, ``dtype`` and
    ``load_in_4bit`` place it, see :func:`grpo_ext.rewards.prm_formats.model_load_kwargs`) or a model in memory
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
        device=None,
        dtype=None,
        load_in_4bit: bool = False,
    ):
        if path is not None:
            from transformers import AutoModelForTokenClassification, AutoTokenizer

            folder = Path(path)
            if not (folder / "config.json").is_file():
                raise FileNotFoundError(f"process_reward_model: no model folder (config.json) at {path}")
            placement = (
                # the classification head (`score` in Llama/Qwen/Mistral, `classifier` in BERT) stays unquantised
                model_load_kwargs(device, dtype, load_in_4bit, keep_modules=["score", "classifier"])
                if device is not None or dtype is not None or load_in_4bit
                else {"use_safetensors": True}
            )
            model = load_whole(
                AutoModelForTokenClassification,
                folder,
                "token_classification",
                trust_remote_code=trust_remote_code,
                **placement,
            )
            tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)
        if model is None or tokenizer is None:
            raise ValueError("ProcessRewardModel needs a model folder or both model= and tokenizer=")
        if not step_separator:
            raise ValueError("ProcessRewardModel needs a step_separator")
        check_batch_size(batch_size)
        self.model, self.tokenizer = model.eval(), tokenizer
        self.step_separator, self.batch_size = step_separator, batch_size
        self.__name__ = f"prm_{Path(path).name}" if path is not None else "prm"

    @torch.no_grad()
    def __call__(self, prompts: list, completions: list, **kwargs) -> list[list[float]]:
        device = next(self.model.parameters()).device
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        encoded = [
            step_end_positions(self.tokenizer, completion_text(p), completion_text(c), self.step_separator)
            for p, c in zip(prompts, completions, strict=True)
        ]
        out: list[list[float]] = []
        for start in range(0, len(encoded), self.batch_size):
            chunk = encoded[start : start + self.batch_size]
            batch = {k: v.to(device) for k, v in right_pad([ids for ids, _ in chunk], pad).items()}
            scores = step_scores(self.model(**batch, use_cache=False).logits)
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


# ---- one loader for every format --------------------------------------------------------------------------------


def detect_prm_format(path: str | os.PathLike) -> str:
    """The format of a PRM folder, from the ``architectures`` in its config.json."""
    folder = Path(path)
    config = json.loads((folder / "config.json").read_text())
    architectures = config.get("architectures") or []
    if any(a.endswith("ForProcessRewardModel") for a in architectures):
        return "qwen_prm"
    if any(a.endswith("ForTokenClassification") for a in architectures):
        return "token_classification"
    if any(a.endswith("ForCausalLM") for a in architectures):
        return "step_tag"  # the one causal-LM format: a tag after each step, good/bad tokens scored there
    raise UserError(
        f"process_reward_model: cannot tell the format of {folder} from config.json (architectures "
        f"{architectures}); set process_reward_model_format to one of {', '.join(PRM_FORMATS)}"
    )


def load_process_reward_model(path: str | os.PathLike, format: str | None = None, **format_kwargs) -> Callable:
    """A PRM folder as a callable ``prm(prompts=, completions=, **kwargs) -> list[list[float]]``: one score in
    [0, 1] per step of each completion, the steps as ``step_separator`` (the policy's step rule) splits them.

    Args:
        path: a local model folder (config.json, tokenizer, safetensors weights) or a hub id (its configs, tokenizer
            and safetensors fetched into the hub cache; pickled weights and code never are).
        format: one of :data:`PRM_FORMATS`; None detects it (:func:`detect_prm_format`).
        format_kwargs: ``step_separator`` (default ``"\\n"``), ``batch_size`` (16), ``device`` (CPU), ``dtype``
            (bf16 on a GPU, else float32), ``load_in_4bit`` (nf4, False); for ``step_tag`` also ``step_tag``,
            ``good_token``, ``bad_token`` (Math-Shepherd's ``ки``, ``+``, ``-``); for ``qwen_prm`` also
            ``system_prompt`` (the model card's).
    """
    folder = reward_model_folder(path)
    require_safetensors(folder)
    if format is None:
        format = detect_prm_format(folder)
    if format not in PRM_FORMATS:
        raise UserError(
            f"process_reward_model_format: unknown value {format!r}; expected one of {', '.join(PRM_FORMATS)}"
        )
    if "batch_size" in format_kwargs:  # before any weights load
        check_batch_size(format_kwargs["batch_size"])
    allowed = COMMON_OPTIONS + FORMAT_OPTIONS[format]
    unknown = sorted(set(format_kwargs) - set(allowed))
    if unknown:
        raise TypeError(
            f"process_reward_model: format {format!r} takes no {', '.join(unknown)} (its options: {', '.join(allowed)})"
        )
    if format == "step_tag":
        return load_step_tag_prm(folder, **format_kwargs)
    if format == "qwen_prm":
        return load_qwen_prm(folder, **format_kwargs)
    separator = format_kwargs.pop("step_separator", "\n")
    return ProcessRewardModel(folder, separator, **format_kwargs)


def process_reward_model_from_config(args, accelerator) -> Callable:
    """The PRM of a `GRPOExtConfig` (``process_reward_model`` and its ``process_reward_model_*`` fields), placed
    whole on this process's device (one copy per process); the policy's ``step_separator`` splits the steps."""
    step_tag_fields = {
        "step_tag": args.process_reward_model_step_tag,
        "good_token": args.process_reward_model_good_token,
        "bad_token": args.process_reward_model_bad_token,
    }
    return load_process_reward_model(
        args.process_reward_model,
        args.process_reward_model_format,
        step_separator=args.step_separator or "\n",
        batch_size=args.process_reward_model_batch_size,
        device=accelerator.device,
        load_in_4bit=args.process_reward_model_load_in_4bit,
        **{k: v for k, v in step_tag_fields.items() if v is not None},
    )
