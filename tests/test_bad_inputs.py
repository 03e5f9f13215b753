"""Table-driven: each bad input gets an error naming the culprit and what was expected, or a logged fallback."""

import math

import pytest
import torch
from datasets import Dataset

from grpo_ext.char_tokenizer import build_char_tokenizer
from grpo_ext.config import GRPOExtConfig
from grpo_ext.evaluation.metrics import maj_at_k, pass_at_k
from grpo_ext.models import resolve_model_path
from grpo_ext.rewards.checked import checked_reward_func
from grpo_ext.rewards.prm import ProcessRewardModel
from grpo_ext.rewards.process import score_steps
from grpo_ext.script_args import TaskArguments
from grpo_ext.tasks import get_task
from grpo_ext.tasks.base import require_prompt_column

TOKENIZER = build_char_tokenizer()


def config(**overrides):
    base = dict(output_dir="/tmp/bad", use_cpu=True, per_device_train_batch_size=8, num_generations=4, report_to="none")
    return GRPOExtConfig(**{**base, **overrides})


def reward(values):
    def bad_reward(prompts, completions, **kwargs):
        if isinstance(values, Exception):
            raise values
        return values

    return checked_reward_func(bad_reward)


def steps(returned, completions=("1+2=3;#3",)):
    ids = [TOKENIZER(c, add_special_tokens=False).input_ids for c in completions]

    def bad_steps(prompts, completions, **kwargs):
        return returned

    return lambda: score_steps([bad_steps], TOKENIZER, ";", ["1+2="] * len(ids), list(completions), ids, {})


CASES = {
    # configs
    "unknown advantage_mode": (
        lambda: config(advantage_mode="processs"),
        ValueError,
        "advantage_mode: unknown value 'processs'; expected one of outcome, process, online_rft",
    ),
    "unknown zero_std_groups": (
        lambda: config(zero_std_groups="drop"),
        ValueError,
        "zero_std_groups: unknown value 'drop'",
    ),
    "unknown kl_controller": (lambda: config(kl_controller="pid"), ValueError, "kl_controller: unknown value 'pid'"),
    "adaptive with beta 0": (lambda: config(kl_controller="adaptive"), ValueError, "needs beta > 0"),
    "target_kl <= 0": (
        lambda: config(kl_controller="adaptive", beta=0.1, target_kl=-1.0),
        ValueError,
        "target_kl: must be a positive number, got -1.0",
    ),
    "kl_horizon <= 0": (
        lambda: config(kl_controller="adaptive", beta=0.1, kl_horizon=0),
        ValueError,
        "kl_horizon: must be a positive number",
    ),
    "beta_max < beta_min": (
        lambda: config(kl_controller="adaptive", beta=0.1, beta_max=1e-9),
        ValueError,
        "beta_max: must be >= beta_min",
    ),
    "negative max_refill_rounds": (lambda: config(max_refill_rounds=-1), ValueError, "max_refill_rounds: must be >= 0"),
    "empty step_separator": (
        lambda: config(step_separator=""),
        ValueError,
        "step_separator: must be a non-empty string",
    ),
    "task_kwargs not JSON": (
        lambda: TaskArguments(task_kwargs="{digits: 3"),
        ValueError,
        "task_kwargs: expected a JSON object",
    ),
    "no reward function": (lambda: TaskArguments(reward_funcs=[]), ValueError, "reward_funcs: at least one"),
    # tasks and datasets
    "unknown task": (lambda: get_task("gsm9k"), ValueError, "unknown task 'gsm9k'; known tasks: .*arithmetic"),
    "unknown task knob": (lambda: get_task("arithmetic", digitz=3), ValueError, "task 'arithmetic': bad task_kwargs"),
    "dataset without prompt": (
        lambda: require_prompt_column(Dataset.from_dict({"question": ["q"]}), "data.jsonl"),
        ValueError,
        "data.jsonl: dataset has no 'prompt' column",
    ),
    "empty dataset": (
        lambda: require_prompt_column(Dataset.from_dict({"prompt": []}), "data.jsonl"),
        ValueError,
        "data.jsonl: dataset is empty",
    ),
    # reward functions
    "reward not a number": (
        lambda: reward([1.0, "yes"])(["a", "b"], ["c", "d"]),
        ValueError,
        "reward function 'bad_reward': completion 1 got 'yes'; expected a float or None",
    ),
    "reward infinite": (
        lambda: reward([math.inf])(["a"], ["b"]),
        ValueError,
        "'bad_reward': completion 0 got an infinite reward",
    ),
    "reward raises": (
        lambda: reward(KeyError("answer"))(["a"], ["b"]),
        RuntimeError,
        "reward function 'bad_reward' raised KeyError",
    ),
    "reward not a list": (lambda: reward(0.5)(["a"], ["b"]), ValueError, "returned float; expected a list of floats"),
    # process reward functions
    "process: wrong number of completions": (
        steps([[1.0, 1.0], [1.0]]),
        ValueError,
        "returned 2 results for 1 completions",
    ),
    "process: wrong number of step scores": (
        steps([[1.0]]),
        ValueError,
        "returned 1 step scores for completion 0, which has 2 steps",
    ),
    "process: non-number step score": (steps([[1.0, "ok"]]), ValueError, "non-number step score 'ok'"),
    "process: infinite step score": (steps([[1.0, -math.inf]]), ValueError, "infinite step score"),
    # models and checkpoints
    "missing model folder": (
        lambda: resolve_model_path("./no/such/model"),
        FileNotFoundError,
        "model_name_or_path: no such model folder",
    ),
    "missing PRM folder": (
        lambda: ProcessRewardModel("/no/such/prm", ";"),
        FileNotFoundError,
        "process_reward_model: no model folder",
    ),
    # evaluation arguments
    "k > n": (lambda: pass_at_k(4, 1, 8), ValueError, "k"),
    "maj answers/correct lengths": (lambda: maj_at_k(["1", "2"], [True], 1), ValueError, "len"),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_bad_input_is_named(case):
    trigger, error, message = CASES[case]
    with pytest.raises(error, match=message):
        trigger()


def test_table_is_big_enough():
    assert len(CASES) >= 20


def test_documented_fallbacks_none_and_nan_mean_missing():
    """None or NaN from a reward function is not an error: the completion (or step) is treated as unscored."""
    assert reward([None, math.nan, 1.0])(["a"] * 3, ["b"] * 3)[:1] == [None]
    scored = steps([[1.0, None]])()
    assert scored[0].scores[0] == 1.0 and math.isnan(scored[0].scores[1])


def test_model_folder_without_config(tmp_path):
    with pytest.raises(FileNotFoundError, match="has neither config.json nor adapter_config.json"):
        resolve_model_path(str(tmp_path))


def test_checkpoint_without_grpo_ext_state(tmp_path):
    from tests.trainer_utils import tiny_args, tiny_trainer

    trainer = tiny_trainer(args=tiny_args(tmp_path=tmp_path))
    trainer.create_optimizer_and_scheduler(num_training_steps=1)
    (tmp_path / "checkpoint-1").mkdir()
    with pytest.raises(FileNotFoundError, match="checkpoint-1 has no grpo_ext_state.json"):
        trainer._load_optimizer_and_scheduler(str(tmp_path / "checkpoint-1"))
    assert torch.isfinite(torch.tensor(trainer.beta))
