"""The reward model's training lifecycle in iterative RL (DeepSeekMath 4.1.4): initialised from the policy's own
weights, trained on verifier-labelled samples, evaluated against the verifier.

- Outcome RM: ``AutoModelForSequenceClassification`` with one logit, read at the last token of
  ``prompt + completion``. Trained **pointwise** with binary cross-entropy against the verifier's 0/1 label
  (``problem_type="multi_label_classification"`` gives ``BCEWithLogitsLoss`` in transformers' own loss), with a
  plain ``transformers.Trainer``. Why not TRL's ``RewardTrainer`` (Bradley-Terry on chosen/rejected pairs): our
  labels are absolute (the verifier says right or wrong), pairs exist only for prompts whose samples disagree
  (all-right and all-wrong groups, 30-60% of the data here, would be thrown away), and a pairwise loss is
  shift-invariant, so ``sigmoid(logit)`` is not a probability and "accuracy against the verifier" would need an
  arbitrary threshold. BCE uses every sample and its sigmoid is P(correct), thresholded at 0.5.
- Process RM: ``AutoModelForTokenClassification`` with two labels in TRL's PRM format: the last token of each
  step carries the step verifier's 0/1 label, every other token ``-100``; trained with the model's own
  cross-entropy (``ignore_index=-100``) by ``transformers.Trainer``. The saved folder plugs into
  ``GRPOExtTrainer`` through ``process_reward_model``.

Scoring is the reward sources' (:class:`grpo_ext.rewards.orm.RMRewardFunction`,
:class:`grpo_ext.rewards.prm.ProcessRewardModel`): the RM is evaluated exactly as the policy's trainer reads it.

Records (the RM's training data) are dicts: ``id``, ``prompt``, ``completion``, ``label`` (0/1 outcome) and, for
the process RM, ``step_labels`` (one 0/1 per step; None: nothing to check, no label).
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from grpo_ext.errors import UserError
from grpo_ext.rewards.classifier import load_classifier, right_pad, token_ids, with_pad_token
from grpo_ext.rewards.orm import RMRewardFunction
from grpo_ext.rewards.prm import ProcessRewardModel, step_end_positions
from grpo_ext.tasks.base import completion_text

REWARD_MODEL_TYPES = ("outcome", "process")
#: Where the RM's weights start: the policy's body with a new head, or the policy's architecture at random.
RM_INITS = ("policy", "scratch")
IGNORE_INDEX = -100

__all__ = [
    "IGNORE_INDEX",
    "REWARD_MODEL_TYPES",
    "RM_INITS",
    "RewardModelCollator",
    "check_reward_model_type",
    "encode_outcome",
    "encode_process",
    "evaluate_reward_model",
    "init_reward_model",
    "load_reward_model",
    "train_reward_model",
    "with_lora",
]


def check_reward_model_type(reward_model_type: str) -> None:
    if reward_model_type not in REWARD_MODEL_TYPES:
        raise UserError(
            f"reward_model_type: unknown value {reward_model_type!r}; expected one of {', '.join(REWARD_MODEL_TYPES)}"
        )


def _auto_class(reward_model_type: str):
    from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

    check_reward_model_type(reward_model_type)
    if reward_model_type == "outcome":
        return AutoModelForSequenceClassification
    return AutoModelForTokenClassification


def _dtype(name: str | None) -> torch.dtype:
    return getattr(torch, name) if name else torch.float32


def init_reward_model(
    reward_model_type: str,
    policy_dir: str | os.PathLike,
    init: str = "policy",
    seed: int = 0,
    dtype: str | None = None,
    lora_r: int = 0,
):
    """``(model, tokenizer)``: a fresh RM on the policy's architecture and tokenizer.

    ``init="policy"``: ``from_pretrained`` of the causal-LM folder into a classification class keeps every
    ``model.*`` weight and initialises only ``score`` (the paper initialises its RMs from the base model the same
    way). ``init="scratch"``: the same architecture with random weights. Both draw from ``seed`` only. ``dtype``
    (default float32) is the weights'; bfloat16 only for an RM trained through a LoRA adapter (``lora_r > 0``).
    """
    if _dtype(dtype) != torch.float32 and lora_r == 0:
        raise UserError("rm_dtype: a reward model trained without LoRA (rm_lora_r: 0) is trained in float32")
    from transformers import AutoConfig, AutoTokenizer

    auto_class = _auto_class(reward_model_type)
    folder = Path(policy_dir)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"reward model init: no model folder (config.json) at {policy_dir}")
    tokenizer = with_pad_token(AutoTokenizer.from_pretrained(folder))
    if reward_model_type == "outcome":
        head = {"num_labels": 1, "problem_type": "multi_label_classification"}
    else:
        head = {"num_labels": 2}
    config = AutoConfig.from_pretrained(folder, pad_token_id=tokenizer.pad_token_id, **head)
    config.classifier_dropout = 0.0  # the token-classification head's dropout: off, like TRL's trainers do
    if init not in RM_INITS:
        raise UserError(f"rm_init: unknown value {init!r}; expected one of {', '.join(RM_INITS)}")
    # The new head (and, from scratch, every weight) is drawn from torch's global generator, which torch seeds from the
    # OS in every process (torch.initial_seed() differs run to run): unseeded, the PRM arms of two identical iterative
    # runs differed. Seed a private fork of it: the same seed gives the same RM, and the caller's stream is untouched.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if init == "policy":
            from transformers.utils import logging as hf_logging

            verbosity = hf_logging.get_verbosity()
            hf_logging.set_verbosity_error()  # the head is new by design: no "newly initialized weights" report
            try:
                model = auto_class.from_pretrained(folder, config=config, use_safetensors=True, dtype=_dtype(dtype))
            finally:
                hf_logging.set_verbosity(verbosity)
        else:
            model = auto_class.from_config(config, dtype=_dtype(dtype))
    return model, tokenizer


def load_reward_model(reward_model_type: str, path: str | os.PathLike, dtype: str | None = None):
    """``(model, tokenizer)`` of a saved RM folder (eval mode), to score it or to continue training it; in ``dtype``
    (default float32: the loader of the reward sources), bfloat16 for an RM trained through LoRA."""
    if _dtype(dtype) == torch.float32:
        return load_classifier(_auto_class(reward_model_type), path)
    from transformers import AutoTokenizer

    model = _auto_class(reward_model_type).from_pretrained(Path(path), use_safetensors=True, dtype=_dtype(dtype))
    return model.eval(), with_pad_token(AutoTokenizer.from_pretrained(path))


#: The classification head of the RM classes the loop builds (transformers' Llama/Qwen/Mistral name it `score`).
HEAD = "score"


def with_lora(model, reward_model_type: str, r: int, alpha: int):
    """``model`` wrapped in a fresh LoRA adapter of rank ``r`` on every linear layer of its body (PEFT's
    ``all-linear``), its head trained whole (``modules_to_save``) in float32 whatever the body's dtype: a bf16 head
    would lose Adam's small updates to rounding. The head's input (the body's hidden states, bf16 on a bf16 body) is
    cast to the head's dtype on the way in."""
    from peft import LoraConfig, TaskType, get_peft_model

    task_type = TaskType.SEQ_CLS if reward_model_type == "outcome" else TaskType.TOKEN_CLS
    config = LoraConfig(
        task_type=task_type, r=r, lora_alpha=alpha, lora_dropout=0.0, target_modules="all-linear",
        modules_to_save=[HEAD],
    )  # fmt: skip
    peft_model = get_peft_model(model, config)
    wrapper = getattr(peft_model.base_model.model, HEAD)
    trained_head = wrapper.modules_to_save["default"]
    trained_head.float()
    wrapper.register_forward_pre_hook(lambda module, args: tuple(a.to(torch.float32) for a in args))
    return peft_model


# ---- encoding and collation ------------------------------------------------------------------------------------
def encode_outcome(tokenizer, record: dict) -> dict:
    """``input_ids`` of prompt + completion and a ``(1,)`` float label (the verifier's verdict)."""
    item = {
        "input_ids": token_ids(tokenizer, completion_text(record["prompt"]) + completion_text(record["completion"]))
    }
    if "label" in record:
        item["labels"] = [float(record["label"])]
    return item


def encode_process(tokenizer, record: dict, separator: str) -> dict:
    """TRL's PRM format: prompt + completion ids; each step's last token labelled 0/1 (-100 for an unlabelled step,
    ``None`` in ``step_labels``), the rest -100.

    Positions come from :func:`grpo_ext.rewards.prm.step_end_positions`, where the PRM reads its scores.
    """
    # a chat prompt as the reward sources read it (its last message): what the RM is trained on is what it scores
    prompt, completion = completion_text(record["prompt"]), completion_text(record["completion"])
    input_ids, ends = step_end_positions(tokenizer, prompt, completion, separator)
    item = {"input_ids": input_ids}
    if "step_labels" in record:
        step_labels = list(record["step_labels"])
        if len(step_labels) != len(ends):
            raise ValueError(
                f"record {record.get('id')!r}: {len(step_labels)} step labels for {len(ends)} steps "
                f"(step_separator {separator!r})"
            )
        labels = [IGNORE_INDEX] * len(input_ids)
        for position, value in zip(ends, step_labels, strict=True):
            labels[position] = IGNORE_INDEX if value is None else int(value)  # None: nothing to check, no label
        item["labels"] = labels
    return item


class RewardModelCollator:
    """Right-pads ``input_ids``; stacks outcome labels to ``(B, 1)`` floats or pads token labels with -100."""

    def __init__(self, pad_token_id: int, reward_model_type: str):
        self.pad, self.reward_model_type = pad_token_id, reward_model_type

    def __call__(self, items: list[dict]) -> dict:
        # a collator's batch lives on the host: Trainer moves it to the model's device
        batch = right_pad([x["input_ids"] for x in items], self.pad)
        if "labels" not in items[0]:
            return batch
        if self.reward_model_type == "outcome":
            batch["labels"] = torch.tensor([x["labels"] for x in items], dtype=torch.float32, device="cpu")
        else:
            labels = torch.full(batch["input_ids"].shape, IGNORE_INDEX, dtype=torch.long, device="cpu")
            for i, x in enumerate(items):
                labels[i, : len(x["labels"])] = torch.tensor(x["labels"], dtype=torch.long, device="cpu")
            batch["labels"] = labels
        return batch


def _training_items(reward_model_type: str, tokenizer, records: Sequence[dict], separator: str | None) -> list[dict]:
    if reward_model_type == "outcome":
        return [encode_outcome(tokenizer, r) for r in records]
    if not separator:
        raise ValueError("the process reward model needs a step_separator")
    items = [encode_process(tokenizer, r, separator) for r in records]
    items = [x for x in items if any(v != IGNORE_INDEX for v in x["labels"])]  # completions without a step
    if not items:
        raise ValueError("process reward model training: no record has a step to label")
    return items


# ---- training --------------------------------------------------------------------------------------------------
def train_reward_model(
    reward_model_type: str,
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
    lora_r: int = 0,
    lora_alpha: int = 32,
    dtype: str | None = None,
) -> dict:
    """Train ``model`` on ``records`` with ``transformers.Trainer`` (the model's own loss) and save it with its
    tokenizer to ``output_dir`` (written to a temporary folder, then renamed). Returns the training metrics.

    ``lora_r > 0``: through a fresh LoRA adapter (:func:`with_lora`), merged into ``model`` after training and the
    whole model cast to ``dtype``: ``model`` itself (changed in place) is then the saved RM, a plain
    classification model, so what the caller measures next is what the policy will be rewarded by."""
    from transformers import PrinterCallback, Trainer, TrainingArguments

    check_reward_model_type(reward_model_type)
    if not records:
        raise ValueError("reward model training: no records")
    items = _training_items(reward_model_type, tokenizer, records, separator)
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
    trained = with_lora(model, reward_model_type, lora_r, lora_alpha) if lora_r > 0 else model
    trained.train()
    collator = RewardModelCollator(tokenizer.pad_token_id, reward_model_type)
    trainer = Trainer(model=trained, args=args, train_dataset=items, data_collator=collator)
    trainer.remove_callback(PrinterCallback)  # the caller reports the returned metrics in one line
    result = trainer.train()
    if lora_r > 0:
        # merged in place: the adapter's layers give their base layers back, the trained head replaces the new one
        merged = trained.merge_and_unload()
        if merged is not model:
            raise RuntimeError("reward model LoRA merge: PEFT returned another model than the one it wrapped")
        model.to(_dtype(dtype))
        del trainer, trained
    model.eval()
    model.save_pretrained(work, safe_serialization=True)
    tokenizer.save_pretrained(work)
    shutil.rmtree(output_dir, ignore_errors=True)
    os.replace(work, output_dir)
    return {"train_loss": float(result.training_loss), "steps": int(result.global_step), "records": len(items)}


# ---- evaluation ------------------------------------------------------------------------------------------------
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


def evaluate_reward_model(
    reward_model_type: str, model, tokenizer, records: Sequence[dict], separator: str | None = None
) -> dict:
    """Accuracy (threshold 0.5) and ROC AUC of the RM against the verifier's labels on ``records``.

    Outcome RM: one verdict per completion against ``label``. Process RM: one verdict per step against
    ``step_labels`` (the step verifier), plus ``outcome_accuracy``/``outcome_auc`` of its minimum step score
    against the outcome label.
    """
    check_reward_model_type(reward_model_type)
    prompts = [r["prompt"] for r in records]
    completions = [r["completion"] for r in records]
    outcome_labels = np.array([r["label"] for r in records])
    if reward_model_type == "outcome":
        scores = RMRewardFunction(model=model, tokenizer=tokenizer)(prompts=prompts, completions=completions)
        return _binary_metrics(np.array(scores), outcome_labels)
    prm = ProcessRewardModel(step_separator=separator, batch_size=64, model=model, tokenizer=tokenizer)
    steps = prm(prompts=prompts, completions=completions)
    pairs = [(s, v) for row, r in zip(steps, records, strict=True) for s, v in zip(row, r["step_labels"], strict=True)]
    labelled = [(s, int(v)) for s, v in pairs if v is not None]  # a step with nothing to check has no label
    flat_scores, flat_labels = [s for s, _ in labelled], [v for _, v in labelled]
    metrics = _binary_metrics(np.array(flat_scores), np.array(flat_labels))
    outcome = _binary_metrics(np.array([min(row) if row else 0.0 for row in steps]), outcome_labels)
    metrics.update(outcome_accuracy=outcome["accuracy"], outcome_auc=outcome["auc"])
    return metrics
