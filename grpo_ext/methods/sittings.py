"""A method run trained in several sittings: what a checkpoint keeps of the runner's own bookkeeping.

A checkpoint (transformers / TRL, `grpo_ext.checkpoints`) holds the weights, the optimizer, the scheduler, the RNG
states, the log history and grpo-ext's trainer state. A method runner keeps more, outside the trainer: the samples
and tokens its reward counters scored (the sample budget stops on them), the learning curve's points and its time,
the training time, and the tokens TRL's SFT and DPO trainers count outside their state (`TrainerTokens`: logged as
``num_tokens``, the cost record's ``trained_tokens``). `RunProgress` saves these in the checkpoint's
``trainer_state.json`` as transformers saves any stateful callback (``ExportableState``, under
``stateful_callbacks``) and puts them back when a run resumes from it, so the resumed run's records
(``training_cost.json``, ``learning_curve.json``, ``training_log.json``) are the uninterrupted run's: the curve holds
every point from step 0, the counts are the whole run's, and the seconds add the sittings' (each up to the checkpoint
the next one resumed from: work redone after a stop is not counted).
"""

from __future__ import annotations

import logging

from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

from grpo_ext.errors import UserError

__all__ = ["PROGRESS_KEY", "RunProgress", "TrainerTokens"]

logger = logging.getLogger(__name__)

#: The key of the runner's bookkeeping in a checkpoint's ``trainer_state.json`` ``stateful_callbacks``.
PROGRESS_KEY = "RunProgress"


class RunProgress(TrainerCallback, ExportableState):
    """Saves ``parts`` (name -> an object with ``state_dict()`` / ``load_state_dict(d)``: the timer, the reward
    counters, the learning curve) with every checkpoint, and restores them when ``train()`` resumes from one.
    ``sittings`` counts the sittings of the run, ``resumed_from`` the step each later one started at."""

    def __init__(self, parts: dict):
        self.parts = {name: part for name, part in parts.items() if part is not None}
        self.sittings = 1
        self.resumed_from: list[int] = []

    def state(self) -> dict:
        return {
            "args": {},
            "attributes": {},
            "sittings": self.sittings,
            "resumed_from": list(self.resumed_from),
            "parts": {name: part.state_dict() for name, part in self.parts.items()},
        }

    def record(self) -> dict:
        """What the run's cost record says of its sittings."""
        return {"sittings": self.sittings, "resumed_from_steps": list(self.resumed_from)}

    def on_train_begin(self, args, state, control, **kwargs):
        if state.global_step == 0:
            return
        saved = state.stateful_callbacks.get(PROGRESS_KEY)
        if not isinstance(saved, dict) or not isinstance(saved.get("parts"), dict):
            logger.warning(
                "resumed at step %d from a checkpoint without the runner's bookkeeping (%s): the learning curve, "
                "the sample counts and the training time count from here",
                state.global_step,
                PROGRESS_KEY,
            )
            # transformers updates the entry of every stateful callback at each save: it must exist
            state.stateful_callbacks[PROGRESS_KEY] = self.state()
            return
        for name, part in self.parts.items():
            if name not in saved["parts"]:
                raise UserError(
                    f"resume_from_checkpoint: the checkpoint keeps no {name!r} of the run's bookkeeping "
                    f"({PROGRESS_KEY}): it was saved by a run of other settings (e.g. curve_every, reward_funcs); "
                    "resume with those"
                )
            part.load_state_dict(saved["parts"][name])
        self.sittings = int(saved.get("sittings", 1)) + 1
        self.resumed_from = [*saved.get("resumed_from", []), state.global_step]


class TrainerTokens:
    """The tokens TRL's SFT and DPO trainers have trained on (``_total_train_tokens``, logged as ``num_tokens``), which
    their checkpoints do not keep: a resumed run would count from 0. (GRPO counts in the trainer's state.)"""

    def __init__(self, trainer):
        self.trainer = trainer

    def state_dict(self) -> dict:
        return {"total_train_tokens": getattr(self.trainer, "_total_train_tokens", 0)}

    def load_state_dict(self, state: dict) -> None:
        if hasattr(self.trainer, "_total_train_tokens"):
            self.trainer._total_train_tokens = state["total_train_tokens"]
