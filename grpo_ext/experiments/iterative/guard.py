"""The collapse guard: stop an iteration's GRPO when the verifier reward falls, instead of collapsing silently.

A learned reward model can be exploited: the RM's reward rises or stays flat while the verifier's falls (reward
hacking). The loop logs the verifier's reward next to the RM's (weight 0, it never trains the policy); with
``collapse_guard_margin`` set, :class:`CollapseGuard` watches it and stops training at the first logged value that
lies more than the margin below the iteration's first logged value. Each logged value is TRL's mean over the
``logging_steps`` steps since the previous log, so the comparison is between window means, not single noisy steps.
"""

from __future__ import annotations

from collections.abc import Sequence

from transformers import TrainerCallback

__all__ = ["VERIFIER_METRIC", "CollapseGuard", "first_collapse"]

#: The logged metric the guard watches: TRL's per-function reward mean of the task's outcome verifier.
VERIFIER_METRIC = "rewards/outcome_reward/mean"


def first_collapse(values: Sequence[float], margin: float) -> int | None:
    """Index of the first value more than ``margin`` below ``values[0]`` (None when there is none)."""
    if margin <= 0:
        raise ValueError(f"collapse_guard_margin: must be > 0, got {margin}")
    for i, value in enumerate(values):
        if values[0] - value > margin:
            return i
    return None


class CollapseGuard(TrainerCallback):
    """Stops training when the logged verifier reward falls more than ``margin`` below its first logged value.

    ``stopped_at`` is the global step of the stop (None while it has not fired); ``history`` the values seen.
    """

    def __init__(self, margin: float, metric: str = VERIFIER_METRIC):
        if margin <= 0:
            raise ValueError(f"collapse_guard_margin: must be > 0, got {margin}")
        self.margin, self.metric = float(margin), metric
        self.history: list[float] = []
        self.stopped_at: int | None = None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or self.metric not in logs or self.stopped_at is not None:
            return control
        self.history.append(float(logs[self.metric]))
        if first_collapse(self.history, self.margin) is not None:
            self.stopped_at = int(state.global_step)
            control.should_training_stop = True
        return control
