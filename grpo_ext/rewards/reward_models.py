"""Learned reward models for iterative RL (DeepSeekMath 4.1.4), initialised from the policy's own weights.

- Outcome RM: ``AutoModelForSequenceClassification`` with one logit, read at the last token of
  ``prompt + completion``. Trained **pointwise** with binary cross-entropy against the verifier's 0/1 label
  (``problem_type="multi_label_classification"`` gives ``BCEWithLogitsLoss`` in transformers' own loss), with a
  plain ``transformers.Trainer``. Why not TRL's ``RewardTrainer`` (Bradley-Terry on chosen/rejected pairs): our
  labels are absolute (the verifier says right or wrong), pairs exist only for prompts whose samples disagree
  (all-right and all-wrong groups, 30-60% of the data here, would be thrown away), and a pairwise loss is
  shift-invariant, so ``sigmoid(logit)`` is not a probability and "accuracy against the verifier" would need an
  arbitrary threshold. BCE uses every sample and its sigmoid is P(correct), thresholded at 0.5.
- Process RM: ``AutoModelForTokenClassification`` with two labels in TRL's PRM format: the last token of each
  step (``grpo_ext.steps``) carries the step verifier's 0/1 label, every other token ``-100``; trained with the
  model's own cross-entropy (``ignore_index=-100``) by ``transformers.Trainer``. The saved folder plugs into
  ``GRPOExtTrainer`` through ``process_reward_model`` / :class:`grpo_ext.rewards.prm.ProcessRewardModel`.

Both read ``prompt + completion`` tokenized without special tokens and right-padded, exactly as TRL's
GRPOTrainer feeds a model reward function, so a saved outcome RM also works as ``reward_funcs=[<folder>]``.
:class:`RMRewardFunction` is the outcome RM as a reward *function* (TRL's signature) returning sigmoid scores.

Records (the RM's training data) are dicts: ``id``, ``prompt``, ``completion``, ``label`` (0/1 outcome) and, for
the process RM, ``step_labels`` (one 0/1 per step).
"""

from __future__ import annotations

import logging
import math
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from grpo_ext.steps import step_end_token_indices

logger = logging.getLogger(__name__)

RM_KINDS = ("outcome", "process")
IGNORE_INDEX = -100

__all__ = [
    "RM_KINDS",
    "RMRewardFunction",
    "encode_outcome",
    "encode_process",
    "evaluate_reward_model",
    "init_reward_model",
    "load_reward_model",
    "score_outcome",
    "score_process",
    "train_reward_model",
]


def _check_kind(kind: str) -> None:
    if kind not in RM_KINDS:
        raise ValueError(f"reward_model_type: unknown value {kind!r}; expected one of {', '.join(RM_KINDS)}")


def _auto_class(kind: str):
    from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

    return AutoModelForSequenceClassification if kind == "outcome" else AutoModelForTokenClassification


def _prepare_tokenizer(tokenizer):
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def init_reward_model(kind: str, policy_dir: str | os.PathLike):
    """``(model, tokenizer)``: a fresh RM whose body is the policy's causal-LM body (the head is new).

    ``from_pretrained`` of a causal-LM folder into a classification class keeps every ``model.*`` weight and
    initialises only ``score`` (the paper initialises its RMs from the base model the same way).
    """
    from transformers import AutoConfig, AutoTokenizer

    _check_kind(kind)
    folder = Path(policy_dir)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"reward model init: no model folder (config.json) at {policy_dir}")
    tokenizer = _prepare_tokenizer(AutoTokenizer.from_pretrained(folder))
    extra = {"num_labels": 1, "problem_type": "multi_label_classification"} if kind == "outcome" else {"num_labels": 2}
    config = AutoConfig.from_pretrained(folder, pad_token_id=tokenizer.pad_token_id, **extra)
    config.classifier_dropout = 0.0  # the token-classification head's dropout: off, like TRL's trainers do
    model = _auto_class(kind).from_pretrained(folder, config=config, use_safetensors=True, dtype=torch.float32)
    return model, tokenizer


def load_reward_model(kind: str, path: str | os.PathLike):
    """``(model, tokenizer)`` of a saved RM folder (eval mode)."""
    from transformers import AutoTokenizer

    _check_kind(kind)
    folder = Path(path)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"reward model: no model folder (config.json) at {path}")
    model = _auto_class(kind).from_pretrained(folder, use_safetensors=True, dtype=torch.float32).eval()
    tokenizer = _prepare_tokenizer(AutoTokenizer.from_pretrained(folder))
    return model, tokenizer


# ---- encoding ------------------------------------------------------------------------------------------------
def _ids(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def encode_outcome(tokenizer, record: dict) -> dict:
    """``input_ids`` of prompt + completion and a ``(1,)`` float label (the verifier's verdict)."""
    ids = _ids(tokenizer, record["prompt"] + record["completion"])
    item = {"input_ids": ids}
    if "label" in record:
        item["labels"] = [float(record["label"])]
    return item


def encode_process(tokenizer, record: dict, separator: str) -> dict:
    """TRL's PRM format: prompt + completion ids; each step's last token labelled 0/1, the rest -100.

    Steps (and their end tokens) come from :func:`grpo_ext.steps.step_end_token_indices`, as the trainer and
    :class:`~grpo_ext.rewards.prm.ProcessRewardModel` find them, so labels sit exactly where scores are read.
    """
    prompt_ids = _ids(tokenizer, record["prompt"])
    completion_ids = _ids(tokenizer, record["completion"])
    ends = [len(prompt_ids) + e for e in step_end_token_indices(tokenizer, completion_ids, separator)]
    item = {"input_ids": prompt_ids + completion_ids, "step_ends": ends}
    if "step_labels" in record:
        step_labels = list(record["step_labels"])
        if len(step_labels) != len(ends):
            raise ValueError(
                f"record {record.get('id')!r}: {len(step_labels)} step labels for {len(ends)} steps "
                f"(step_separator {separator!r})"
            )
        labels = [IGNORE_INDEX] * len(item["input_ids"])
        for position, value in zip(ends, step_labels, strict=True):
            labels[position] = int(value)
        item["labels"] = labels
    return item


class _Collator:
    """Right-pads ``input_ids``; stacks outcome labels to ``(B, 1)`` floats or pads token labels with -100."""

    def __init__(self, pad_token_id: int, kind: str = "outcome"):
        self.pad, self.kind = pad_token_id, kind

    def __call__(self, items: list[dict]) -> dict:
        width = max(max(len(x["input_ids"]) for x in items), 1)
        input_ids = torch.full((len(items), width), self.pad, dtype=torch.long)
        attention_mask = torch.zeros((len(items), width), dtype=torch.long)
        for i, x in enumerate(items):
            input_ids[i, : len(x["input_ids"])] = torch.tensor(x["input_ids"], dtype=torch.long)
            attention_mask[i, : len(x["input_ids"])] = 1
        batch = {"input_ids": input_ids, "attention_mask": attention_mask}
        if "labels" in items[0]:
            if self.kind == "outcome":
                batch["labels"] = torch.tensor([x["labels"] for x in items], dtype=torch.float32)
            else:
                labels = torch.full((len(items), width), IGNORE_INDEX, dtype=torch.long)
                for i, x in enumerate(items):
                    labels[i, : len(x["labels"])] = torch.tensor(x["labels"], dtype=torch.long)
                batch["labels"] = labels
        return batch


def _encode(kind: str, tokenizer, records: Sequence[dict], separator: str | None) -> list[dict]:
    if kind == "outcome":
        return [encode_outcome(tokenizer, r) for r in records]
    if not separator:
        raise ValueError("the process reward model needs a step_separator")
    return [encode_process(tokenizer, r, separator) for r in records]


# ---- scoring -------------------------------------------------------------------------------------------------
def _batches(items: list, batch_size: int):
    for start in range(0, len(items), batch_size):
        yield items[start : start + batch_size]


@torch.no_grad()
def score_outcome(model, tokenizer, prompts: Sequence[str], completions: Sequence[str], batch_size: int = 64):
    """P(correct) = sigmoid(logit) per completion, as a float numpy array."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    collate = _Collator(tokenizer.pad_token_id)
    pairs = zip(prompts, completions, strict=True)
    items = [encode_outcome(tokenizer, {"prompt": p, "completion": c}) for p, c in pairs]
    out = []
    try:
        for chunk in _batches(items, batch_size):
            batch = {k: v.to(device) for k, v in collate(chunk).items()}
            out.append(torch.sigmoid(model(**batch).logits[:, 0].float()).cpu())
    finally:
        model.train(was_training)
    return torch.cat(out).numpy() if out else np.zeros(0, dtype=np.float32)


@torch.no_grad()
def score_process(model, tokenizer, prompts, completions, separator: str, batch_size: int = 64) -> list[list[float]]:
    """P(step right) at each step's last token, one list per completion."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    collate = _Collator(tokenizer.pad_token_id)
    pairs = zip(prompts, completions, strict=True)
    items = [encode_process(tokenizer, {"prompt": p, "completion": c}, separator) for p, c in pairs]
    out: list[list[float]] = []
    try:
        for chunk in _batches(items, batch_size):
            batch = {k: v.to(device) for k, v in collate([{"input_ids": x["input_ids"]} for x in chunk]).items()}
            logits = model(**batch).logits.float()
            probs = torch.sigmoid(logits[..., 0]) if logits.shape[-1] == 1 else torch.softmax(logits, dim=-1)[..., 1]
            out.extend(probs[i, x["step_ends"]].tolist() for i, x in enumerate(chunk))
    finally:
        model.train(was_training)
    return out


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
            model, tokenizer = load_reward_model("outcome", path)
        if model is None or tokenizer is None:
            raise ValueError("RMRewardFunction needs a reward model folder or both model= and tokenizer=")
        if model.config.num_labels != 1:
            raise ValueError(f"RMRewardFunction needs a one-logit outcome RM, got num_labels={model.config.num_labels}")
        self.model, self.tokenizer, self.batch_size = model.eval(), tokenizer, batch_size
        self.__name__ = name or (f"orm_{Path(path).name}" if path is not None else "orm")

    def __call__(self, prompts: list, completions: list, **kwargs) -> list[float]:
        from grpo_ext.tasks.base import _text

        texts_p = [_text(p) if not isinstance(p, str) else p for p in prompts]
        texts_c = [_text(c) for c in completions]
        return score_outcome(self.model, self.tokenizer, texts_p, texts_c, self.batch_size).tolist()


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


# ---- training ------------------------------------------------------------------------------------------------
def train_reward_model(
    kind: str,
    model,
    tokenizer,
    records: Sequence[dict],
    output_dir: str | os.PathLike,
    *,
    separator: str | None = None,
    epochs: float = 2.0,
    learning_rate: float = 5e-4,
    batch_size: int = 64,
    weight_decay: float = 0.0,
    warmup_ratio: float = 0.05,
    seed: int = 0,
) -> dict:
    """Train ``model`` on ``records`` with ``transformers.Trainer`` (the model's own loss) and save it with its
    tokenizer to ``output_dir`` (written to a temporary folder, then renamed). Returns the training metrics."""
    from transformers import Trainer, TrainingArguments

    _check_kind(kind)
    if not records:
        raise ValueError("reward model training: no records")
    items = _encode(kind, tokenizer, records, separator)
    if kind == "process":
        items = [x for x in items if any(v != IGNORE_INDEX for v in x["labels"])]  # completions without a step
        if not items:
            raise ValueError("process reward model training: no record has a step to label")
    for x in items:
        x.pop("step_ends", None)
    output_dir = Path(output_dir)
    work = output_dir.with_name(output_dir.name + ".tmp")
    shutil.rmtree(work, ignore_errors=True)
    steps_per_epoch = math.ceil(len(items) / batch_size)
    args = TrainingArguments(
        output_dir=str(work),
        per_device_train_batch_size=batch_size,
        num_train_epochs=epochs,
        learning_rate=learning_rate,
        weight_decay=weight_decay,
        warmup_steps=max(0, int(warmup_ratio * steps_per_epoch * epochs)),
        lr_scheduler_type="linear",
        logging_steps=max(1, steps_per_epoch),
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=seed,
        data_seed=seed,
        remove_unused_columns=False,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    model.train()
    collator = _Collator(tokenizer.pad_token_id, kind)
    trainer = Trainer(model=model, args=args, train_dataset=items, data_collator=collator)
    result = trainer.train()
    model.eval()
    model.save_pretrained(work, safe_serialization=True)
    tokenizer.save_pretrained(work)
    shutil.rmtree(output_dir, ignore_errors=True)
    os.replace(work, output_dir)
    return {"train_loss": float(result.training_loss), "steps": int(result.global_step), "records": len(items)}


# ---- evaluation ----------------------------------------------------------------------------------------------
def _binary_metrics(scores: np.ndarray, labels: np.ndarray) -> dict:
    from sklearn.metrics import roc_auc_score

    scores, labels = np.asarray(scores, dtype=float), np.asarray(labels, dtype=int)
    if len(labels) == 0:
        return {"accuracy": None, "auc": None, "n": 0, "positive_rate": None}
    auc = float(roc_auc_score(labels, scores)) if 0 < labels.sum() < len(labels) else None
    return {
        "accuracy": float(np.mean((scores >= 0.5) == (labels == 1))),
        "auc": auc,
        "n": int(len(labels)),
        "positive_rate": float(labels.mean()),
        "mean_score": float(scores.mean()),
    }


def evaluate_reward_model(kind: str, model, tokenizer, records: Sequence[dict], separator: str | None = None) -> dict:
    """Accuracy (threshold 0.5) and ROC AUC of the RM against the verifier's labels on ``records``.

    Outcome RM: one verdict per completion against ``label``. Process RM: one verdict per step against
    ``step_labels`` (the step verifier), plus ``outcome_accuracy``/``outcome_auc`` of its minimum step score
    against the outcome label.
    """
    _check_kind(kind)
    prompts = [r["prompt"] for r in records]
    completions = [r["completion"] for r in records]
    if kind == "outcome":
        return _binary_metrics(
            score_outcome(model, tokenizer, prompts, completions), np.array([r["label"] for r in records])
        )
    steps = score_process(model, tokenizer, prompts, completions, separator)
    flat_scores = [s for row in steps for s in row]
    flat_labels = [int(v) for r in records for v in r["step_labels"]]
    metrics = _binary_metrics(np.array(flat_scores), np.array(flat_labels))
    outcome = _binary_metrics(
        np.array([min(row) if row else 0.0 for row in steps]), np.array([r["label"] for r in records])
    )
    metrics.update(outcome_accuracy=outcome["accuracy"], outcome_auc=outcome["auc"])
    return metrics
