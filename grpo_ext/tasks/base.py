"""What every verifiable task provides: data with TRL's `prompt` column, answer extraction and verifiers.

The contract of :class:`Task`:

- required: ``name``, :meth:`Task.load`, :meth:`Task.extract_answer`;
- answer checking: :meth:`Task.normalize_answer` and :meth:`Task.is_correct` (exact match of normalised keys by
  default), and :meth:`Task.outcome_reward` built on them;
- optional step verifier: :meth:`Task.verify_steps` returns one score per step, or None on the base class. A task
  has one when it overrides the method; ask :attr:`Task.has_step_verifier` (never ``getattr(task, "verify_steps")``:
  every task has the method). :meth:`Task.step_reward` is the verifier as a process reward function;
- evaluation defaults: :attr:`Task.harness_defaults`, a :class:`HarnessDefaults` (the harness's problem limit and
  generation length when its command line does not say). A subclass inherits its parent's; the base's are generic;
- slices: :meth:`Task.problem_attributes` gives the attributes of one problem (operation, number of operands,
  MATH's level...), :attr:`Task.slice_attributes` names the ones the harness slices its report by by default;
- answer format: :meth:`Task.extract_strict_answer` reads the answer only where it is written in the task's strict
  form (:attr:`Task.strict_form`, e.g. GSM8K's ``#### n``), beside the lenient :meth:`Task.extract_answer`;
  :meth:`Task.strict_outcome_reward` is the outcome reward that requires it;
- stop strings: :attr:`Task.stop_strings`, where a sample ends (the text is cut before the first of them, as
  lm-eval's ``until`` cuts it), e.g. a new ``Question:`` for GSM8K-format prompts;
- samples cut off at the length cap: the trainer passes :data:`TRUNCATED` (``completion_truncated=[bool, ...]``, one
  per completion) to every reward function. A cut-off sample has no answer: :meth:`Task.outcome_reward` and
  :meth:`Task.strict_outcome_reward` give it 0.0 whatever its last number (the cap cut its last line: a number read
  there, a step label or half an answer, is not an answer it gave), and :meth:`Task.step_reward` gives its cut line no
  score. A sample that ended at an end-of-sequence token or a stop string is finished.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from datasets import Dataset

from grpo_ext.errors import UserError

# TRL reward-function signature: f(prompts=, completions=, **dataset_columns, **trainer_kwargs) -> list[float | None]
RewardFunc = Callable[..., list[float | None]]
# Process reward: the same signature, one list of step scores per completion.
ProcessRewardFunc = Callable[..., list[list[float]]]
#: The reward-function keyword the trainer adds (one bool per completion): True where the sample was cut off at the
#: length cap (``max_completion_length`` tokens, no end-of-sequence token, no stop string). Absent: none was.
TRUNCATED = "completion_truncated"


def truncated_at_cap(
    completion_ids: Sequence[int],
    text: str,
    *,
    max_length: int,
    end_ids: Collection[int],
    stop_strings: Sequence[str] = (),
) -> bool:
    """Whether a sample was cut off at the length cap (the :data:`TRUNCATED` flag the trainer passes).

    Finished: it ended on its own, at an end-of-sequence token (or padding: TRL's rule for
    ``mask_truncated_completions``) or at a stop string (the sampler backend keeps the ids up to and including the
    token that completes one, with no EOS after it: TRL's rule alone would call that sample truncated). Cut off:
    ``len(completion_ids) >= max_length``, its last id is none of ``end_ids`` (EOS and pad ids), and no stop string is
    in ``text`` (the decoded completion, which keeps the stop string sampling stopped at: a stop string anywhere
    counts, since sampling stops at the first one).
    """
    if len(completion_ids) < max_length:
        return False  # it stopped before the cap: an EOS, a stop string, or a caller's own end
    if completion_ids and completion_ids[-1] in end_ids:
        return False
    return not any(stop in text for stop in stop_strings)


def truncated_flags(kwargs: Mapping, n: int) -> list[bool]:
    """The :data:`TRUNCATED` flags a reward function was given (all False when it was given none: a caller that does
    not know, as TRL's own trainer)."""
    flags = kwargs.get(TRUNCATED)
    if flags is None:
        return [False] * n
    flags = [bool(f) for f in flags]
    if len(flags) != n:
        raise ValueError(f"{TRUNCATED}: {len(flags)} flags for {n} completions")
    return flags


def completion_text(completion) -> str:
    """A completion (or prompt) as TRL passes it, as text: a string, or the last message of a conversation."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    raise TypeError(f"completion must be a string or a list of chat messages, got {type(completion).__name__}")


@dataclass(frozen=True)
class HarnessDefaults:
    """What the evaluation harness (``evals/passk_majk.py``, ``evals/compare.py``) and the lm-eval glue use for a
    task when they are not told: sized so that a run without options fits the task's answers and finishes.

    Attributes:
        limit: problems evaluated (the first ``limit`` of the split); None = all of them.
        max_new_tokens: tokens generated per sample, enough for the task's answers.
    """

    limit: int | None = None
    max_new_tokens: int = 512

    def __post_init__(self):
        # checked when the task class is defined, so a bad default fails at import, not in the middle of a run
        for field, value, allow_none in (("limit", self.limit, True), ("max_new_tokens", self.max_new_tokens, False)):
            if value is None and allow_none:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                none = "None or " if allow_none else ""
                raise ValueError(f"HarnessDefaults.{field} must be {none}an integer >= 1, got {value!r}")


class Task(ABC):
    """A verifiable task. Subclasses set `name` and implement loading, extraction and checking."""

    name: str = ""
    #: Separator between reasoning steps in a solution, or None when steps are not marked.
    step_separator: str | None = None
    #: The harness's defaults for this task (a subclass sets its own or inherits its parent's).
    harness_defaults: ClassVar[HarnessDefaults] = HarnessDefaults()
    #: The problem attributes (keys of :meth:`problem_attributes`) a report is sliced by when it is not told.
    slice_attributes: tuple[str, ...] = ()
    #: Where a sample ends: its text is cut before the first occurrence of any of these (lm-eval's ``until``).
    stop_strings: tuple[str, ...] = ()
    #: The strict answer form in words (for reports), or None when the lenient extraction is the only form.
    strict_form: str | None = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # a dict here ({"limit": 500}) would go unchecked until the harness reads it: refuse it where it is written
        if not isinstance(cls.harness_defaults, HarnessDefaults):
            raise TypeError(
                f"{cls.__name__}.harness_defaults must be a HarnessDefaults(limit=..., max_new_tokens=...), "
                f"got {type(cls.harness_defaults).__name__}"
            )

    @abstractmethod
    def load(self, split: str, n: int | None = None) -> Dataset:
        """Rows with `prompt` (str), `answer` (str, the reference answer) and task-specific columns."""

    @abstractmethod
    def extract_answer(self, completion: str) -> str | None:
        """The normalised answer key of a completion (used for majority voting), or None if there is none."""

    def is_correct(self, completion: str, answer: str) -> bool:
        """Whether the completion's final answer equals the reference answer."""
        predicted = self.extract_answer(completion)
        return predicted is not None and predicted == self.normalize_answer(answer)

    def normalize_answer(self, answer: str) -> str:
        """The reference answer in the same normal form as `extract_answer` returns."""
        return answer.strip()

    def outcome_reward(self, prompts: list, completions: list, answer: list[str], **kwargs) -> list[float]:
        """TRL reward function: 1.0 for a right final answer, 0.0 otherwise; 0.0 for a sample cut off at the length
        cap (:data:`TRUNCATED`: it has no answer)."""
        cut = truncated_flags(kwargs, len(completions))
        return [
            float(not t and self.is_correct(completion_text(c), a))
            for c, a, t in zip(completions, answer, cut, strict=True)
        ]

    # ---- the strict answer form ----------------------------------------------------------------------------------
    def extract_strict_answer(self, completion: str) -> str | None:
        """The normalised answer when the completion states it in the task's strict form, else None. The base's
        strict form is its only form (:meth:`extract_answer`); tasks with a lenient fallback (GSM8K's last number)
        override this."""
        return self.extract_answer(completion)

    def is_correct_strict(self, completion: str, answer: str) -> bool:
        """Whether the completion is right *and* states its answer in the strict form."""
        return self.extract_strict_answer(completion) is not None and self.is_correct(completion, answer)

    def strict_outcome_reward(self, prompts: list, completions: list, answer: list[str], **kwargs) -> list[float]:
        """TRL reward function (``reward_funcs: [outcome_strict]``): 1.0 for a right answer in the strict form, 0.0
        otherwise (a right number without ``####`` earns nothing, nor does a sample cut off at the length cap)."""
        cut = truncated_flags(kwargs, len(completions))
        return [
            float(not t and self.is_correct_strict(completion_text(c), a))
            for c, a, t in zip(completions, answer, cut, strict=True)
        ]

    # ---- slices --------------------------------------------------------------------------------------------------
    def problem_attributes(self, row: Mapping) -> dict[str, str]:
        """The attributes of one problem (a row of :meth:`load`: its prompt and columns) that a report can be sliced
        by, as strings (``{"operation": "-", "operands": "2"}``); none on the base class."""
        return {}

    # ---- the optional step verifier ----------------------------------------------------------------------------
    def verify_steps(self, prompt: str, completion: str) -> list[float] | None:
        """The rule-based step verifier: one score per step of `completion` (1.0 right, 0.0 wrong, NaN for a step
        with nothing to check: no reward there, no label), the steps split on `step_separator` as
        `grpo_ext.reasoning_steps.step_texts` splits them (so the counts agree with the trainer's step ends). None
        here: the base task has no step verifier; tasks with one override this."""
        return None

    @property
    def has_step_verifier(self) -> bool:
        """Whether this task overrides :meth:`verify_steps` (process rewards and process RM labels need it)."""
        return type(self).verify_steps is not Task.verify_steps

    def step_reward(self, prompts: list, completions: list, **kwargs) -> list[list[float]]:
        """Process reward function (TRL's signature): the step verifier's scores, one list per completion. The last
        step of a sample cut off at the length cap (:data:`TRUNCATED`) gets NaN (no score): the cap cut that line,
        so what it says is unfinished, neither a right nor a wrong step."""
        if not self.has_step_verifier:
            raise ValueError(f"task {self.name!r} has no step verifier (verify_steps)")
        cut = truncated_flags(kwargs, len(completions))
        out = []
        for p, c, t in zip(prompts, completions, cut, strict=True):
            scores = list(self.verify_steps(completion_text(p), completion_text(c)))
            if t and scores:
                scores[-1] = math.nan
            out.append(scores)
        return out


def require_prompt_column(dataset: Dataset, source: str) -> Dataset:
    """TRL's GRPOTrainer reads prompts from a `prompt` column; say so early (a `UserError` naming the data source)."""
    if "prompt" not in dataset.column_names:
        raise UserError(f"{source}: dataset has no 'prompt' column (columns: {dataset.column_names})")
    if len(dataset) == 0:
        raise UserError(f"{source}: dataset is empty")
    return dataset
