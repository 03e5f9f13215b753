"""grpo_ext.methods: the unified paradigm's registry, its generated table, the method configs and pure helpers."""

import math
from pathlib import Path

import pytest
import torch
import yaml

from grpo_ext.advantages import GRADIENT_COEFFICIENTS, get_gradient_coefficient
from grpo_ext.methods import METHODS, Method, get_method, paradigm_markdown, paradigm_rows
from grpo_ext.methods.config import check_budget, parse_method_args, sampling_budget
from grpo_ext.methods.draws import dpo_pairs, rft_examples
from grpo_ext.methods.paradigm import PARADIGM_COLUMNS, register_method
from grpo_ext.methods.trainers import build_online, grpo_config
from grpo_ext.tasks import get_task

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "methods"
EXPECTED = ("sft", "rft", "online_rft", "dpo", "grpo_outcome", "grpo_process")


# ---- gradient coefficients on one hand-worked batch ---------------------------------------------------------
# Two groups of two outputs. Group 0: rewards 1, 0; group 1: rewards 0, 0 (no signal).
REWARDS = torch.tensor([1.0, 0.0, 0.0, 0.0])
# Process supervision on group 0 only (T = 4 tokens): output 0 has steps ending at t=1 (reward 1) and t=3
# (reward 0); output 1 one step ending at t=2 (reward 1). Group 1 has no steps at all.
NAN = float("nan")
STEP_REWARDS = torch.tensor(
    [
        [NAN, 1.0, NAN, 0.0],
        [NAN, NAN, 1.0, NAN],
        [NAN, NAN, NAN, NAN],
        [NAN, NAN, NAN, NAN],
    ]
)


def gc(method_name: str, **inputs) -> torch.Tensor:
    """The gradient coefficient of a method, through the registry key its description names."""
    fn = get_gradient_coefficient(get_method(method_name).advantage_mode)
    return fn(rewards=REWARDS, step_rewards=STEP_REWARDS, group_size=2, **inputs)


def test_grpo_outcome_coefficient_by_hand():
    # group 0: mean 0.5, Bessel std sqrt(0.5) -> (1 - 0.5) / (0.70711 + 1e-4) = +-0.70701; group 1: all equal -> 0
    a = 0.5 / (math.sqrt(0.5) + 1e-4)
    torch.testing.assert_close(gc("grpo_outcome"), torch.tensor([a, -a, 0.0, 0.0]))


def test_grpo_process_coefficient_by_hand():
    # the group's three step rewards 1, 0, 1: mean 2/3, Bessel std sqrt(1/3); normalised +-:
    std = math.sqrt(1 / 3) + 1e-4
    hi, lo = (1 - 2 / 3) / std, (0 - 2 / 3) / std  # +0.5772, -1.1544
    expected = torch.tensor(
        [
            [hi + lo, hi + lo, lo, lo],  # tokens up to the first step's end get both steps, then only the second
            [hi, hi, hi, 0.0],  # after its only step: 0
            [0.0, 0.0, 0.0, 0.0],
            [0.0, 0.0, 0.0, 0.0],
        ]
    )
    torch.testing.assert_close(gc("grpo_process"), expected)


def test_online_rft_coefficient_by_hand():
    torch.testing.assert_close(gc("online_rft"), torch.tensor([1.0, 0.0, 0.0, 0.0]))
    # no group statistics: the all-correct group keeps GC 1 (GRPO would give it 0)
    fn = GRADIENT_COEFFICIENTS["online_rft"]
    torch.testing.assert_close(fn(rewards=torch.tensor([1.0, 1.0]), group_size=2), torch.tensor([1.0, 1.0]))


# ---- the registry and the generated table ---------------------------------------------------------------------


def test_registry_holds_six_methods_and_only_the_online_ones_have_a_gradient_coefficient():
    assert tuple(METHODS) == EXPECTED
    online = {name for name, m in METHODS.items() if m.online}
    assert online == {"online_rft", "grpo_outcome", "grpo_process"}
    for method in METHODS.values():
        if method.online:
            assert method.advantage_mode in GRADIENT_COEFFICIENTS
        else:
            assert method.advantage_mode is None


def test_paradigm_table_is_generated_from_the_registry():
    rows = paradigm_rows()
    assert [r["name"] for r in rows] == list(METHODS)
    table = paradigm_markdown()
    lines = table.splitlines()
    assert len(lines) == 2 + len(METHODS)
    assert lines[0] == "| " + " | ".join(h for h, _ in PARADIGM_COLUMNS) + " |"
    for line, method in zip(lines[2:], METHODS.values(), strict=True):
        assert line.startswith(f"| {method.title} | ")
        for text in (method.data_source, method.reward_function, method.gradient_coefficient):
            assert text.replace("|", "\\|") in line
    assert "`online_rft`" in table and "`process`" in table


# How an entry trains (its trainer builder and config class): these tests are about what it is.
HOW = (build_online, grpo_config)


def test_a_new_method_shows_up_in_the_table(monkeypatch):
    monkeypatch.setattr("grpo_ext.methods.paradigm.METHODS", dict(METHODS))
    from grpo_ext.methods import paradigm

    register_method(
        Method("toy", "Toy RL", "q ~ P(Q), o ~ pi_theta", "rule", "+-1", True, "outcome", "x", "online", *HOW)
    )
    assert "| Toy RL | q ~ P(Q), o ~ pi_theta | rule | +-1 |" in paradigm.paradigm_markdown()
    with pytest.raises(ValueError, match="already registered"):
        register_method(Method("toy", "T", "d", "r", "g", True, "outcome", "x", "online", *HOW))


def test_an_online_method_must_name_a_registered_gradient_coefficient():
    with pytest.raises(ValueError, match="not a registered gradient coefficient"):
        Method("bad", "Bad", "d", "r", "g", True, "no_such_mode", "x", "online", *HOW)
    with pytest.raises(ValueError, match="needs an advantage_mode"):
        Method("bad", "Bad", "d", "r", "g", True, None, "x", "online", *HOW)
    with pytest.raises(ValueError, match="offline method has no advantage_mode"):
        Method("bad", "Bad", "d", "r", "g", False, "outcome", "x", "sft", *HOW)


def test_unknown_method_is_named():
    with pytest.raises(ValueError, match=r"unknown method 'ppo'; known methods: sft, rft"):
        get_method("ppo")


# ---- the configs ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", EXPECTED)
def test_every_method_has_a_config_that_parses(name):
    path = CONFIGS / f"{name}.yaml"
    assert yaml.safe_load(path.read_text())["method"] == name
    method_args, task_args, training_args, model_args = parse_method_args(["--config", str(path)])
    assert method_args.method == name
    assert model_args.model_name_or_path == "embedded"
    method = get_method(name)
    if method.online:
        assert training_args.advantage_mode == method.advantage_mode
    check_budget(name, method_args, task_args, training_args)  # the budget written down is the one implied


def _parsed(name):
    return parse_method_args(["--config", str(CONFIGS / f"{name}.yaml")])


def test_methods_share_base_prompts_steps_and_comparable_budgets():
    parsed = {name: _parsed(name) for name in EXPECTED}
    first = parsed["sft"]
    for _margs, task_args, training_args, model_args in parsed.values():
        assert task_args.task == first[1].task and task_args.task_kwargs == first[1].task_kwargs
        assert task_args.train_size == first[1].train_size
        assert model_args.model_name_or_path == first[3].model_name_or_path
        assert training_args.max_steps == first[2].max_steps
        assert training_args.learning_rate == first[2].learning_rate
    budgets = {name: sampling_budget(name, *parsed[name][:3]) for name in EXPECTED}
    assert budgets["sft"] == 0
    sampling = {budgets[n] for n in EXPECTED if n != "sft"}
    assert len(sampling) == 1 and sampling.pop() > 0, budgets
    # every method computes its gradient on the same number of sequences per step (a DPO pair is two)
    from grpo_ext.methods.config import trained_sequences_per_step

    assert len({trained_sequences_per_step(n, parsed[n][2]) for n in EXPECTED}) == 1


def test_a_budget_that_does_not_match_the_config_is_refused():
    args = _parsed("rft")
    args[0].sample_budget = 123
    with pytest.raises(ValueError, match="sample_budget: the config states 123 samples"):
        check_budget("rft", *args[:3])


def test_config_errors_name_the_problem(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("method: ppo\n")
    with pytest.raises(ValueError, match="unknown method 'ppo'"):
        parse_method_args(["--config", str(bad)])
    bad.write_text("task: arithmetic\n")
    with pytest.raises(ValueError, match="no `method:` key"):
        parse_method_args(["--config", str(bad)])
    with pytest.raises(FileNotFoundError, match="no such file"):
        parse_method_args(["--config", str(tmp_path / "missing.yaml")])


def test_online_runner_refuses_a_config_whose_advantage_mode_disagrees(tmp_path):
    from grpo_ext.methods.runners import train_method

    args = parse_method_args(
        ["--config", str(CONFIGS / "grpo_process.yaml"), "--advantage_mode", "outcome", "--output_dir", str(tmp_path)]
    )
    with pytest.raises(ValueError, match="advantage_mode: method 'grpo_process' trains with `process`"):
        train_method(*args)


def test_a_refill_run_generates_no_more_than_its_sample_budget(tmp_path):
    """Two-token answers are never right: every group lacks signal and refills, 2 rounds a step. The budget (4 steps
    x 8 samples) allows the first step and its 2 refills (24), then the second step's batch (32), and no refill of
    it: the budget is read before each round, not only after each step (where it was 48 of 32)."""
    from grpo_ext.methods import run_method

    flags = ["--zero_std_groups", "refill", "--max_refill_rounds", "2", "--max_completion_length", "2"]
    flags += ["--per_device_train_batch_size", "8", "--num_generations", "4", "--max_steps", "4"]
    flags += ["--sample_budget", "32", "--train_size", "32", "--curve_every", "0", "--output_dir", str(tmp_path)]
    cost = run_method(["--config", str(CONFIGS / "grpo_outcome.yaml"), *flags])
    assert cost["samples_generated"] == 32 and cost["optimizer_steps"] == 2, cost


# ---- DPO pairs ---------------------------------------------------------------------------------------------------


def test_dpo_pairs_use_distinct_correct_and_incorrect_samples():
    task = get_task("arithmetic")
    prompts = ["1+2=", "3+4=", "5+5="]
    answers = ["3", "7", "10"]
    samples = [
        ["1+2=3;#3", "1+2=3;#3", "1+2=4;#4", "1+2=5;#5"],  # 1 distinct correct, 2 incorrect
        ["3+4=7;#7", "3+4=7;#7"],  # only correct: no pair
        ["5+5=11;#11", "x"],  # only incorrect: no pair
    ]
    pairs = dpo_pairs(task, prompts, answers, samples, max_pairs=4, seed=0)
    assert len(pairs) == 2
    assert {p["rejected"] for p in pairs} == {"1+2=4;#4", "1+2=5;#5"}
    assert all(p["prompt"] == "1+2=" and p["chosen"] == "1+2=3;#3" for p in pairs)
    assert len(dpo_pairs(task, prompts, answers, samples, max_pairs=1, seed=0)) == 1


# ---- RFT examples -------------------------------------------------------------------------------------------------


def test_rft_trains_on_the_correct_samples_only_once_each():
    # RFT's gradient coefficient as the runner applies it: 1 for a correct sample, 0 (dropped) for an incorrect one
    task = get_task("arithmetic")
    prompts = ["1+2=", "3+4=", "5+5="]
    answers = ["3", "7", "10"]
    samples = [
        ["1+2=3;#3", "1+2=3;#3", "1+2=4;#4"],  # a correct sample twice: trained on once, counted twice
        ["3+4=8;#8"],  # none correct: the prompt gives nothing
        ["5+5=10;#10", "5+5=9+1;#10"],  # two distinct correct samples
    ]
    kept_prompts, kept_completions, n_correct = rft_examples(task, prompts, answers, samples)
    assert n_correct == 4
    assert kept_prompts == ["1+2=", "5+5=", "5+5="]
    assert kept_completions == ["1+2=3;#3", "5+5=10;#10", "5+5=9+1;#10"]
