"""A process reward model (PRM) as a process reward source: one score in [0, 1] per reasoning step.

:func:`load_process_reward_model` loads a PRM folder in any format of the registry :data:`PRM_FORMATS` (detected
from its config.json when not given) as a callable with TRL's reward signature:

- ``token_classification``: TRL's PRM format (``PRMTrainer``), :class:`ProcessRewardModel` below. A
  token-classification model reads ``prompt + completion`` (each tokenized without special tokens) and is labelled
  at the last token of each step. A step's score is P(label 1) there: the softmax of a two-label head, or the
  sigmoid of a one-logit head. Steps and their last tokens come from :mod:`grpo_ext.reasoning_steps`, as the trainer
  finds them; :func:`step_end_positions` is also where the iterative loop's PRM training puts its labels, so labels and
  scores sit on the same tokens.
- ``step_tag`` (Math-Shepherd) and ``qwen_prm`` (Qwen2.5-Math-PRM): :mod:`grpo_ext.rewards.prm_formats`; the steps
  are re-joined in the PRM's own input format and each tag's score maps back to the policy's step.

Each format is one :class:`PRMFormat` entry (how its config.json is recognised, its own options, its loader): a new
format is one :func:`register_prm_format` call, and the detection, the option check, the config's choices
(`grpo_ext.config`) and the config's option fields (``process_reward_model_<option>``) read the entry.

:func:`process_reward_model_from_config` is what the trainer builds from ``process_reward_model`` and its
``process_reward_model_*`` fields, on the process's device. The iterative loop builds :class:`ProcessRewardModel`
from a model in memory.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from grpo_ext.errors import UserError
from grpo_ext.reasoning_steps import step_end_token_indices
from grpo_ext.registration import qualified_name
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
from grpo_ext.tasks.base import completion_text

__all__ = [
    "COMMON_OPTIONS",
    "PRM_FORMATS",
    "PRMFormat",
    "PRMOutcomeReward",
    "ProcessRewardModel",
    "detect_prm_format",
    "get_prm_format",
    "load_process_reward_model",
    "process_reward_model_from_config",
    "register_prm_format",
    "step_end_positions",
    "step_scores",
]

#: Options every format takes (load_process_reward_model's **format_kwargs); each format adds its own.
COMMON_OPTIONS = ("step_separator", "batch_size", "device", "dtype", "load_in_4bit")


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


# ---- the registry of formats ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PRMFormat:
    """A registry entry: one PRM format.

    Attributes:
        name: the ``process_reward_model_format`` value that selects it.
        detect: a folder's config.json (as a dict) -> whether the folder is in this format.
        options: its own keyword options, beyond :data:`COMMON_OPTIONS` (a config field
            ``process_reward_model_<option>``, where there is one, is passed on as the option).
        load: ``(folder, **options) -> prm``, the callable
            ``prm(prompts=, completions=, **kwargs) -> list[list[float]]``.
    """

    name: str
    detect: Callable[[dict], bool]
    options: tuple[str, ...]
    load: Callable[..., Callable]


#: ``process_reward_model_format`` value -> its entry, in the order the error messages list them.
PRM_FORMATS: dict[str, PRMFormat] = {}


def register_prm_format(entry: PRMFormat) -> PRMFormat:
    """Add ``entry`` to :data:`PRM_FORMATS`: a taken name is a ``ValueError`` unless it is loaded by the same function
    (its module reloaded)."""
    existing = PRM_FORMATS.get(entry.name)
    if existing is not None and qualified_name(existing.load) != qualified_name(entry.load):
        raise ValueError(f"PRM format {entry.name!r} is already registered")
    PRM_FORMATS[entry.name] = entry
    return entry


def get_prm_format(name: str) -> PRMFormat:
    """The registry entry for ``name``; a `UserError` naming the field and the registered formats."""
    try:
        return PRM_FORMATS[name]
    except KeyError:
        raise UserError(
            f"process_reward_model_format: unknown value {name!r}; expected one of {', '.join(PRM_FORMATS)}"
        ) from None


def architecture_ends_with(suffix: str) -> Callable[[dict], bool]:
    """A ``detect`` rule: some entry of config.json's ``architectures`` ends with ``suffix``."""
    return lambda config: any(a.endswith(suffix) for a in config.get("architectures") or [])


def _load_token_classification(folder: Path, step_separator: str = "\n", **kwargs) -> ProcessRewardModel:
    return ProcessRewardModel(folder, step_separator, **kwargs)


register_prm_format(
    PRMFormat("token_classification", architecture_ends_with("ForTokenClassification"), (), _load_token_classification)
)
# the one causal-LM format: a tag after each step, good/bad tokens scored there
register_prm_format(
    PRMFormat("step_tag", architecture_ends_with("ForCausalLM"), tuple(STEP_TAG_DEFAULTS), load_step_tag_prm)
)
register_prm_format(
    PRMFormat("qwen_prm", architecture_ends_with("ForProcessRewardModel"), ("system_prompt",), load_qwen_prm)
)


# ---- one loader for every format --------------------------------------------------------------------------------


def detect_prm_format(path: str | os.PathLike) -> str:
    """The format of a PRM folder: the first registered format whose ``detect`` accepts its config.json."""
    folder = Path(path)
    config = json.loads((folder / "config.json").read_text())
    for entry in PRM_FORMATS.values():
        if entry.detect(config):
            return entry.name
    raise UserError(
        f"process_reward_model: cannot tell the format of {folder} from config.json (architectures "
        f"{config.get('architectures') or []}); set process_reward_model_format to one of {', '.join(PRM_FORMATS)}"
    )


def load_process_reward_model(path: str | os.PathLike, format: str | None = None, **format_kwargs) -> Callable:
    """A PRM folder as a callable ``prm(prompts=, completions=, **kwargs) -> list[list[float]]``: one score in
    [0, 1] per step of each completion, the steps as ``step_separator`` (the policy's step rule) splits them.

    Args:
        path: a local model folder (config.json, tokenizer, safetensors weights) or a hub id (its configs, tokenizer
            and safetensors fetched into the hub cache; pickled weights and code never are).
        format: a name in :data:`PRM_FORMATS`; None detects it (:func:`detect_prm_format`).
        format_kwargs: ``step_separator`` (default ``"\\n"``), ``batch_size`` (16), ``device`` (CPU), ``dtype``
            (bf16 on a GPU, else float32), ``load_in_4bit`` (nf4, False); and the format's own options: for
            ``step_tag`` ``step_tag``, ``good_token``, ``bad_token`` (Math-Shepherd's ``ки``, ``+``, ``-``); for
            ``qwen_prm`` ``system_prompt`` (the model card's).
    """
    folder = reward_model_folder(path)
    require_safetensors(folder)
    entry = get_prm_format(format if format is not None else detect_prm_format(folder))
    if "batch_size" in format_kwargs:  # before any weights load
        check_batch_size(format_kwargs["batch_size"])
    allowed = COMMON_OPTIONS + entry.options
    unknown = sorted(set(format_kwargs) - set(allowed))
    if unknown:
        raise TypeError(
            f"process_reward_model: format {entry.name!r} takes no {', '.join(unknown)} (its options: "
            f"{', '.join(allowed)})"
        )
    return entry.load(folder, **format_kwargs)


def process_reward_model_from_config(args, accelerator) -> Callable:
    """The PRM of a `GRPOExtConfig` (``process_reward_model`` and its ``process_reward_model_*`` fields), placed
    whole on this process's device (one copy per process); the policy's ``step_separator`` splits the steps. A
    format option with a config field (``process_reward_model_<option>``) is passed on when the field is set."""
    options = {option for entry in PRM_FORMATS.values() for option in entry.options}
    fields = {option: getattr(args, f"process_reward_model_{option}", None) for option in sorted(options)}
    return load_process_reward_model(
        args.process_reward_model,
        args.process_reward_model_format,
        step_separator=args.step_separator or "\n",
        batch_size=args.process_reward_model_batch_size,
        device=accelerator.device,
        load_in_4bit=args.process_reward_model_load_in_4bit,
        **{k: v for k, v in fields.items() if v is not None},
    )
