"""The learning curve of a method run: pass@1 on validation prompts against the training samples seen so far.

Validation, never test: a curve is drawn for every run, searched settings that are not picked included, and only a
picked setting may ever be scored on test (the study's rule).

Written as ``learning_curve.json`` next to the checkpoint (:data:`grpo_ext.methods.cost.CURVE_FILE`) when the
config sets ``curve_every > 0``. Its evaluations are timed apart, so the run's cost counts training only.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from grpo_ext.evaluation.callback import PassKMajKCallback
from grpo_ext.evaluation.harness import validate_problems
from grpo_ext.methods.config import trained_sequences_per_step
from grpo_ext.sampler.sampling import SamplingParams

__all__ = ["CURVE_SPLIT", "LearningCurve", "add_learning_curve"]

#: The split a learning curve is scored on.
CURVE_SPLIT = "validation"


class LearningCurve(PassKMajKCallback):
    """The harness callback, plus its own wall time and the training samples at each point."""

    def __init__(self, *args, sequences_per_step: int, generated: Callable[[], int] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.sequences_per_step = sequences_per_step
        self.generated = generated
        self.samples_generated: list[int] = []  # at each evaluation, in history order
        self.seconds = 0.0

    def evaluate(self, model, tokenizer) -> dict[str, float]:
        start = time.perf_counter()
        if self.generated is not None:
            self.samples_generated.append(int(self.generated()))
        try:
            return super().evaluate(model, tokenizer)
        finally:
            self.seconds += time.perf_counter() - start

    def on_train_begin(self, args, state, control, **kwargs):
        if state.global_step == 0:  # resumed: the first sitting drew the start's point (restored by load_state_dict)
            super().on_train_begin(args, state, control, **kwargs)

    def state_dict(self) -> dict:
        """The points so far, for a checkpoint (:mod:`grpo_ext.methods.sittings`)."""
        return {
            "history": [dict(h) for h in self.history],
            "samples_generated": list(self.samples_generated),
            "seconds": self.seconds,
            "last_step": self.last_step,
        }

    def load_state_dict(self, state: dict) -> None:
        self.history = [dict(h) for h in state["history"]]
        self.samples_generated = [int(n) for n in state["samples_generated"]]
        self.seconds = float(state["seconds"])
        self.last_step = state["last_step"]

    def points(self) -> list[dict]:
        points = [{**h, "trained_sequences": h["step"] * self.sequences_per_step} for h in self.history]
        for point, generated in zip(points, self.samples_generated, strict=False):
            point["samples_generated"] = generated
        return points


def add_learning_curve(
    trainer, task, method_name: str, method_args, training_args, generated: Callable[[], int] | None = None
) -> LearningCurve | None:
    """A :class:`LearningCurve` on the first ``curve_prompts`` prompts of the task's ``validation`` split
    (:data:`CURVE_SPLIT`), sampled as the harness samples them (the task's stop strings end a sample), added to
    ``trainer``; None when ``curve_every`` is 0. ``generated()`` returns the samples
    generated so far (recorded at every point)."""
    if method_args.curve_every <= 0:
        return None
    problems = validate_problems(
        list(task.load(CURVE_SPLIT, method_args.curve_prompts))[: method_args.curve_prompts],
        task,
        f"learning curve ({task.name} {CURVE_SPLIT})",
    )
    params = SamplingParams(
        n=method_args.curve_n,
        temperature=method_args.curve_temperature,
        max_new_tokens=method_args.sample_max_new_tokens,
        seed=0,
        batch_size=method_args.sample_batch_size,
        # the task's stop strings, as the study's evaluations cut samples: without them every sample ran to the
        # length cap writing further questions (2-3x the tokens of an answer), and was scored on that longer text
        stop=tuple(getattr(task, "stop_strings", ())),
    )
    curve = LearningCurve(
        task,
        problems,
        params,
        sorted({1, method_args.curve_n}),
        method_args.curve_every,
        eval_on_start=True,
        trainer=trainer,
        sequences_per_step=trained_sequences_per_step(method_name, training_args),
        generated=generated,
    )
    trainer.add_callback(curve)
    return curve
