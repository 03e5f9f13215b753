"""A task owns its harness defaults (``Task.harness_defaults``): the harness's command line reads them from the task
that ``--task`` builds, so a new task is its class plus its registry line, with no table to update elsewhere."""

from __future__ import annotations

import pytest
from datasets import Dataset

from grpo_ext.evaluation.cli import HarnessArgumentParser, add_harness_arguments, harness_settings
from grpo_ext.tasks import TASKS, HarnessDefaults, Task


class CountingTask(Task):
    """A new task as a user writes one: a name, data, an answer extractor, and its own harness defaults."""

    name = "counting"
    harness_defaults = HarnessDefaults(limit=7, max_new_tokens=9)

    def load(self, split: str, n: int | None = None) -> Dataset:
        rows = [{"prompt": f"count to {i}:", "answer": str(i)} for i in range(1, 11)]
        return Dataset.from_list(rows[:n])

    def extract_answer(self, completion: str) -> str | None:
        return completion.split()[-1] if completion.split() else None


class PlainTask(CountingTask):
    """A subclass that says nothing about defaults inherits its parent's."""

    name = "plain"


def _settings(*flags: str):
    return harness_settings(add_harness_arguments(HarnessArgumentParser(prog="x")).parse_args(list(flags)))


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(TASKS, "counting", CountingTask)  # the task's registry line
    monkeypatch.setitem(TASKS, "plain", PlainTask)


def test_a_new_task_gets_its_own_defaults_in_the_harness_cli(registered):
    settings = _settings("--task", "counting", "--n", "2")
    assert isinstance(settings.task, CountingTask) and settings.task_id == "counting/test"
    assert settings.limit == 7 and settings.params.max_new_tokens == 9
    flags = _settings("--task", "counting", "--n", "2", "--limit", "3", "--max-new-tokens", "5")
    assert flags.limit == 3 and flags.params.max_new_tokens == 5  # the command line still wins
    plain = _settings("--task", "plain", "--n", "2")
    assert plain.limit == 7 and plain.params.max_new_tokens == 9


@pytest.mark.parametrize(
    ("task", "limit", "max_new_tokens"),
    [("arithmetic", 200, 48), ("word_arithmetic", 500, 64), ("gsm8k", None, 512), ("math", None, 512)],
)
def test_the_shipped_tasks_keep_their_defaults(task, limit, max_new_tokens):
    # the values evaluation/cli.TASK_DEFAULTS held before the tasks owned them (512 and no limit: the generic ones)
    settings = _settings("--task", task, "--n", "2")
    assert (settings.limit, settings.params.max_new_tokens) == (limit, max_new_tokens)


def test_a_task_without_defaults_gets_the_generic_ones():
    class Bare(Task):
        name = "bare"

        def load(self, split, n=None):
            return Dataset.from_list([{"prompt": "p", "answer": "a"}])

        def extract_answer(self, completion):
            return completion

    assert Bare.harness_defaults == HarnessDefaults(limit=None, max_new_tokens=512)


def test_bad_defaults_are_refused_where_the_task_is_written():
    with pytest.raises(TypeError, match="unexpected keyword argument 'limt'"):
        HarnessDefaults(limt=500)  # a misspelt field is not silently ignored
    with pytest.raises(ValueError, match=r"HarnessDefaults\.max_new_tokens must be an integer >= 1, got 0"):
        HarnessDefaults(max_new_tokens=0)
    with pytest.raises(ValueError, match=r"HarnessDefaults\.limit must be None or an integer >= 1, got True"):
        HarnessDefaults(limit=True)
    with pytest.raises(TypeError, match="Typo.harness_defaults must be a HarnessDefaults.*got dict"):

        class Typo(CountingTask):
            harness_defaults = {"limit": 500}  # a plain dict would be read by nothing and checked by nothing
