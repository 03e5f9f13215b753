"""Training cost of a method run: samples generated, tokens, wall time; written next to the checkpoint.

``training_cost.json`` (in the run's output folder) holds:

- ``samples_generated`` / ``generated_tokens``: completions sampled to train (online: every completion the
  trainer scored, refills included; RFT/DPO: the completions drawn once from the base model; SFT: 0) and their
  tokens (the EOS that ends a completion counts as one token);
- ``trained_sequences``: sequences the gradient was computed on, repeats counted (a DPO pair is two sequences): for
  an online method optimizer steps x sequences per step; for an offline one (SFT, RFT, DPO) the epochs over its
  data as the trainer walks them (:func:`offline_trained_examples`: an epoch's last step takes only what is left);
  ``unique_sequences``, the distinct ones among them (an offline method's data; an online method's generated
  samples that were trained on), and ``trained_tokens``, the tokens the TRL trainer reports it processed (prompts
  included). Records written before ``unique_sequences`` counted every offline step as a full batch;
- ``sampling_seconds``, ``train_seconds`` (learning-curve evaluations excluded), ``curve_seconds`` and
  ``wall_seconds`` = sampling + training: the cost of the method, not of measuring it;
- ``sittings`` and ``resumed_from_steps``: a run resumed from its checkpoints (:mod:`grpo_ext.methods.sittings`)
  trained in several sittings; its seconds add each sitting's up to the checkpoint the next resumed from, and its
  counts are the whole run's.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from pathlib import Path

from transformers import TrainerCallback

from grpo_ext.io import atomic_write_text

__all__ = [
    "COST_FILE",
    "CURVE_FILE",
    "LOG_FILE",
    "CountingReward",
    "SampleBudget",
    "TrainTimer",
    "cost_record",
    "offline_trained_examples",
    "read_json_file",
    "write_json_file",
]

COST_FILE = "training_cost.json"
CURVE_FILE = "learning_curve.json"
RUN_FILE = "method_run.json"
LOG_FILE = "training_log.json"  # the trainer's log history (reward, zero-std share, KL, ... every logging step)


class CountingReward:
    """Wraps a TRL reward function and counts the completions (and their tokens) it scores.

    Every completion an online trainer generates for training is scored exactly once by each reward function, so
    the counts are the samples and tokens generated (on this process).
    """

    def __init__(self, fn: Callable):
        self.samples = 0
        self.tokens = 0

        @functools.wraps(fn)
        def counted(*args, completions=None, completion_ids=None, **kwargs):
            self.samples += len(completions) if completions is not None else 0
            self.tokens += sum(len(ids) for ids in completion_ids) if completion_ids is not None else 0
            return fn(*args, completions=completions, completion_ids=completion_ids, **kwargs)

        self.fn = counted

    def state_dict(self) -> dict:
        return {"samples": self.samples, "tokens": self.tokens}

    def load_state_dict(self, state: dict) -> None:
        self.samples, self.tokens = int(state["samples"]), int(state["tokens"])


class SampleBudget(TrainerCallback):
    """Stops training before a step would take the generated samples past ``budget``.

    Online methods generate ``per_step`` samples a step, so without refills the budget ends exactly at
    ``max_steps``; zero-std refills generate more a step, and the arm then trains fewer steps at the same budget.
    Within a step, :meth:`allowance` (the trainer's ``refill_allowance``) keeps the refills inside the budget.
    """

    def __init__(self, counter: CountingReward, budget: int, per_step: int):
        self.counter, self.budget, self.per_step = counter, budget, per_step

    def on_step_end(self, args, state, control, **kwargs):
        if self.counter.samples + self.per_step > self.budget:
            control.should_training_stop = True

    def allowance(self) -> int:
        """Completions still within the budget: what a refill round may draw."""
        return self.budget - self.counter.samples


class TrainTimer(TrainerCallback):
    """Wall time of ``trainer.train()`` (begin to end; a resumed run's earlier sittings added, `load_state_dict`), and
    the optimizer steps taken."""

    def __init__(self):
        self.start: float | None = None
        self.before = 0.0  # the earlier sittings' seconds, up to the checkpoint this one resumed from
        self.seconds = 0.0
        self.steps = 0

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.perf_counter()

    def on_train_end(self, args, state, control, **kwargs):
        self.seconds = self.state_dict()["seconds"]
        self.steps = state.global_step

    def state_dict(self) -> dict:
        now = time.perf_counter() - self.start if self.start is not None else 0.0
        return {"seconds": self.before + now}

    def load_state_dict(self, state: dict) -> None:
        self.before = float(state["seconds"])


def trained_tokens(trainer) -> int | None:
    """Tokens the TRL trainer reports it processed (prompt + completion), or None if it does not say."""
    for name in ("_total_train_tokens",):
        value = getattr(trainer, name, None)
        if isinstance(value, int | float) and value > 0:
            return int(value)
    seen = getattr(trainer.state, "num_input_tokens_seen", 0)
    return int(seen) if seen else None


def offline_trained_examples(examples: int, micro_batch: int, accumulation: int, steps: int) -> int:
    """Examples an offline trainer (transformers' ``Trainer``, ``dataloader_drop_last`` False) computes the gradient on
    in ``steps`` optimizer steps over a dataset of ``examples``, ``micro_batch`` examples a forward (per device x
    processes) and ``accumulation`` forwards a step.

    Steps times the full batch overcounts a small dataset: an epoch is ``ceil(examples / micro_batch)`` forwards, its
    last step takes the forwards left (the trainer's ``remainder``) and the last forward the examples left, so every
    epoch trains each example exactly once. 48 examples at 8 x 4: 2 steps an epoch, 12 steps = 6 epochs = 288, not
    384; 8 examples: one step an epoch of 8."""
    if examples <= 0 or steps <= 0:
        return 0
    forwards = -(-examples // micro_batch)
    steps_per_epoch = -(-forwards // accumulation)
    epochs, rest = divmod(steps, steps_per_epoch)
    # the steps of an unfinished epoch are none of them its last: each takes `accumulation` full forwards
    return epochs * examples + rest * accumulation * micro_batch


def cost_record(
    method: str,
    seed: int,
    sample_budget: int,
    drawn: dict,
    *,
    optimizer_steps: int,
    trained_sequences: int,
    unique_sequences: int,
    trained_tokens: int | None,
    train_seconds: float,
    curve_seconds: float,
    details: dict,
) -> dict:
    """The ``training_cost.json`` record (see the module docstring). ``drawn``: what sampling counted
    (``samples_generated``, ``generated_tokens``, ``sampling_seconds``; missing ones are 0)."""
    sampling = drawn.get("sampling_seconds", 0.0)
    return {
        "method": method,
        "seed": seed,
        "sample_budget": sample_budget,
        "samples_generated": int(drawn.get("samples_generated", 0)),
        "generated_tokens": int(drawn.get("generated_tokens", 0)),
        "optimizer_steps": optimizer_steps,
        "trained_sequences": trained_sequences,
        "unique_sequences": unique_sequences,
        "trained_tokens": trained_tokens,
        "sampling_seconds": round(sampling, 2),
        "train_seconds": round(train_seconds, 2),
        "curve_seconds": round(curve_seconds, 2),
        "wall_seconds": round(sampling + train_seconds, 2),
        "details": details,
    }


def write_json_file(folder: str | Path, name: str, payload: dict | list) -> Path:
    return atomic_write_text(Path(folder) / name, json.dumps(payload, indent=2) + "\n")


def read_json_file(folder: str | Path, name: str):
    """The JSON in ``folder/name``, or None when the file does not exist."""
    path = Path(folder) / name
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None
