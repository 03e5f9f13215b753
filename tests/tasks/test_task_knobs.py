"""A task knob of the wrong type is one line naming the knob, through the CLIs that take `task_kwargs` (exit 2),
instead of a traceback deep in the task (`digits: 2.5`) or a string read as true (`conversational: "no"`)."""

from __future__ import annotations

import pytest

from grpo_ext.cli import run_cli
from grpo_ext.errors import UserError
from grpo_ext.tasks import get_task
from scripts import train


@pytest.mark.parametrize(
    ("task", "knobs", "message"),
    [
        ("word_arithmetic", {"digits": 2.5}, "task_kwargs.digits must be an integer, got 2.5"),
        ("word_arithmetic", {"num_fewshot": 1.5}, "task_kwargs.num_fewshot must be an integer, got 1.5"),
        ("word_arithmetic", {"conversational": "no"}, "task_kwargs.conversational must be true or false"),
        ("arithmetic", {"seed": True}, "task_kwargs.seed must be an integer, got True"),
        ("arithmetic", {"operators": 3}, "task_kwargs.operators must be a string, got 3"),
        ("gsm8k", {"dataset_config": 5}, "task_kwargs.dataset_config must be a string or null, got 5"),
    ],
)
def test_knob_of_the_wrong_type_is_refused(task, knobs, message):
    with pytest.raises(UserError, match=message):
        get_task(task, **knobs)


def test_knobs_of_the_right_type_and_unchecked_ones_pass():
    assert get_task("word_arithmetic", digits=3, conversational=False).arithmetic.digits == 3
    assert get_task("math", levels=["Level 1"]).levels == ["Level 1"]  # a list: the task's own checks


def test_train_cli_names_the_knob(tmp_path, capsys):
    argv = ["--config", "configs/default.yaml", "--output_dir", str(tmp_path / "o"), "--task_kwargs", '{"digits": 2.5}']
    with pytest.raises(SystemExit) as exit_:
        run_cli(train.main, argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "task_kwargs.digits must be an integer, got 2.5" in err[0]
