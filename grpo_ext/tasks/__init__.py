"""Verifiable tasks by name. `get_task("arithmetic", max_operands=3)` builds one.

A new task is one file (a :class:`Task` subclass with its `name`, and its `harness_defaults` unless the generic ones
suit it) plus its line in :data:`TASKS`; the training scripts, the harness and the lm-eval glue find it here."""

from __future__ import annotations

from grpo_ext.errors import UserError, user_input
from grpo_ext.tasks.arithmetic import ArithmeticTask
from grpo_ext.tasks.base import HarnessDefaults, Task
from grpo_ext.tasks.gsm8k import GSM8KTask
from grpo_ext.tasks.jsonl import JSONLTask
from grpo_ext.tasks.math import MathTask
from grpo_ext.tasks.word_arithmetic import WordArithmeticTask

TASKS: dict[str, type[Task]] = {
    "arithmetic": ArithmeticTask,
    "gsm8k": GSM8KTask,
    "math": MathTask,
    "jsonl": JSONLTask,
    "word_arithmetic": WordArithmeticTask,
}


def get_task(name: str, **kwargs) -> Task:
    """The task registered as `name`, built with `kwargs` (its knobs); a bad name or knob is a `UserError`."""
    if name not in TASKS:
        raise UserError(f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}")
    try:
        with user_input(f"task {name!r}"):  # the constructors only check their knobs (step_rule's error too)
            return TASKS[name](**kwargs)
    except TypeError as err:  # an unknown knob: name it rather than show a constructor traceback
        raise UserError(f"task {name!r}: bad task_kwargs {kwargs}: {err}") from err


__all__ = ["TASKS", "HarnessDefaults", "Task", "get_task"]
