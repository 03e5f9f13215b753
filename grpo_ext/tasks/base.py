"""What every verifiable task provides: data with TRL's `prompt` column, answer extraction and verifiers."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

from datasets import Dataset

# TRL reward-function signature: f(prompts=, completions=, **dataset_columns, **trainer_kwargs) -> list[float | None]
RewardFunc = Callable[..., list[float | None]]
# Process reward: the same signature, one list of step scores per completion.
ProcessRewardFunc = Callable[..., list[list[float]]]


class Task(ABC):
    """A verifiable task. Subclasses set `name` and implement loading, extraction and checking."""

    name: str = ""
    #: Separator between reasoning steps in a solution, or None when steps are not marked.
    step_separator: str | None = None

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
        """TRL reward function: 1.0 for a right final answer, 0.0 otherwise."""
        return [float(self.is_correct(_text(c), a)) for c, a in zip(completions, answer, strict=True)]

    #: A rule-based process reward function (one score per step), when the task has a step verifier.
    step_reward: ProcessRewardFunc | None = None


def _text(completion) -> str:
    """A completion as TRL passes it: a string, or a conversational list of messages."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    raise TypeError(f"completion must be a string or a list of chat messages, got {type(completion).__name__}")


def require_prompt_column(dataset: Dataset, source: str) -> Dataset:
    """TRL's GRPOTrainer reads prompts from a `prompt` column; say so early, naming the data source."""
    if "prompt" not in dataset.column_names:
        raise ValueError(f"{source}: dataset has no 'prompt' column (columns: {dataset.column_names})")
    if len(dataset) == 0:
        raise ValueError(f"{source}: dataset is empty")
    return dataset
