"""Verifiable tasks by name. `get_task("arithmetic", max_operands=3)` builds one.

A new task is a :class:`Task` subclass (its `name`, and its `harness_defaults` unless the generic ones suit it) plus
one :func:`register_task` call, from any module (also usable as a class decorator); the training scripts, the harness,
the method runs and the lm-eval glue find it in :data:`TASKS`, and its knobs are checked against its constructor."""

from __future__ import annotations

import types
import typing
from typing import TypeVar

from grpo_ext.errors import UserError, user_input
from grpo_ext.registration import qualified_name
from grpo_ext.tasks.arithmetic import ArithmeticTask
from grpo_ext.tasks.base import HarnessDefaults, Task
from grpo_ext.tasks.gsm8k import GSM8KTask
from grpo_ext.tasks.jsonl import JSONLTask
from grpo_ext.tasks.math import MathTask
from grpo_ext.tasks.word_arithmetic import WordArithmeticTask

#: task name -> its class, as :func:`register_task` added it.
TASKS: dict[str, type[Task]] = {}

_T = TypeVar("_T", bound=type[Task])


def register_task(cls: _T) -> _T:
    """Add the :class:`Task` subclass ``cls`` to :data:`TASKS` under ``cls.name``: ``task: <name>`` is then a valid
    config value for training, the harness, the methods and the lm-eval tasks. Returns ``cls`` (a class decorator). A
    class without a name, or not a Task, is a ``TypeError``; a taken name is a ``ValueError`` unless it is the same
    class (its module reloaded)."""
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise TypeError(f"register_task: expected a Task subclass, got {cls!r}")
    if not isinstance(cls.name, str) or not cls.name:
        raise TypeError(f"register_task: {cls.__qualname__} has no `name`")
    existing = TASKS.get(cls.name)
    if existing is not None and qualified_name(existing) != qualified_name(cls):
        raise ValueError(f"task {cls.name!r} is already registered to {qualified_name(existing)}")
    TASKS[cls.name] = cls
    return cls


for _task in (ArithmeticTask, GSM8KTask, MathTask, JSONLTask, WordArithmeticTask):
    register_task(_task)


#: The plain types a knob's annotation may name: the values each accepts, and how an error names it.
_PLAIN = {
    int: ((int,), "an integer"),
    float: ((int, float), "a number"),
    bool: ((bool,), "true or false"),
    str: ((str,), "a string"),
    type(None): ((type(None),), "null"),
}


def _parts(hint) -> tuple:
    union = isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
    return typing.get_args(hint) if union else (hint,)


def check_knobs(cls: type[Task], kwargs: dict) -> None:
    """Each knob of `kwargs` has the plain type its constructor annotation names (``digits: 2.5``, ``num_fewshot:
    1.5``, ``conversational: "no"`` are refused here, in one line, instead of failing deep in the task or being read
    as true). Knobs annotated otherwise (lists, data files) are left to the task's own checks."""
    hints = typing.get_type_hints(cls.__init__)
    for knob, value in kwargs.items():
        parts = _parts(hints.get(knob))
        if not all(part in _PLAIN for part in parts):
            continue
        # a bool is an int to Python, never to a knob that asks for a number
        ok = any(isinstance(value, _PLAIN[p][0]) and (p is bool or not isinstance(value, bool)) for p in parts)
        if not ok:
            expected = " or ".join(_PLAIN[p][1] for p in parts)
            raise UserError(f"task {cls.name!r}: task_kwargs.{knob} must be {expected}, got {value!r}")


def get_task(name: str, **kwargs) -> Task:
    """The task registered as `name`, built with `kwargs` (its knobs); a bad name or knob is a `UserError`."""
    if name not in TASKS:
        raise UserError(f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}")
    check_knobs(TASKS[name], kwargs)
    try:
        with user_input(f"task {name!r}"):  # the constructors only check their knobs (step_rule's error too)
            return TASKS[name](**kwargs)
    except TypeError as err:  # an unknown knob: name it rather than show a constructor traceback
        raise UserError(f"task {name!r}: bad task_kwargs {kwargs}: {err}") from err


__all__ = ["TASKS", "HarnessDefaults", "Task", "get_task", "register_task"]
