"""The online arms' training dynamics from their logs (grpo_ext/experiments/study/dynamics.py): summaries by hand, the
offline and broken logs, the reader over a study's run folders, the section and the plot."""

from __future__ import annotations

import json
import math

from grpo_ext.experiments.study.config import Arm, Evaluation, Setting, Study
from grpo_ext.experiments.study.dynamics import (
    no_gradient,
    plot_dynamics,
    read_dynamics,
    render_dynamics,
    series,
    summarize,
    trailing,
)
from grpo_ext.methods.cost import LOG_FILE


def _step(step, reward, zero_std, length, clipped, grad):
    return {
        "step": step,
        "reward": reward,
        "frac_reward_zero_std": zero_std,
        "completions/mean_length": length,
        "completions/clipped_ratio": clipped,
        "grad_norm": grad,
        "loss": 0.0,
    }


# two steps with signal, then two with every group all-wrong while the completions run to the 64-token cap;
# the learning curve's evaluations and the trainer's closing summary sit between them, as TRL writes them
COLLAPSE = [
    {"step": 0, "eval/pass@1": 0.1},
    _step(1, 0.25, 0.5, 30.0, 0.25, 0.2),
    _step(2, 0.125, 0.75, 40.0, 0.5, 0.1),
    {"step": 2, "eval/pass@1": 0.0},
    _step(3, 0.0, 1.0, 60.0, 0.875, 0.0),
    _step(4, 0.0, 1.0, 64.0, 1.0, 0.0),
    {"step": 4, "train_loss": 0.01, "train_runtime": 12.0},
]


def test_a_collapse_by_hand():
    assert summarize(COLLAPSE) == {
        "steps": 4,
        "no_gradient_steps": 2,
        "trailing_no_gradient_steps": 2,
        "ends_without_gradient": True,
        "all_zero_std_steps": 2,
        "mean_reward": (0.25 + 0.125 + 0.0 + 0.0) / 4,
        "first_mean_length": 30.0,
        "last_mean_length": 64.0,
        "first_clipped_ratio": 0.25,
        "last_clipped_ratio": 1.0,
    }
    assert series(COLLAPSE) == {
        "step": [1, 2, 3, 4],
        "reward": [0.25, 0.125, 0.0, 0.0],
        "frac_reward_zero_std": [0.5, 0.75, 1.0, 1.0],
        "completions/mean_length": [30.0, 40.0, 60.0, 64.0],
        "completions/clipped_ratio": [0.25, 0.5, 0.875, 1.0],
        "grad_norm": [0.2, 0.1, 0.0, 0.0],
    }


def test_a_run_that_recovers_does_not_end_without_gradient():
    history = [*COLLAPSE[:-1], _step(5, 0.125, 0.75, 50.0, 0.75, 0.3)]
    summary = summarize(history)
    assert summary["no_gradient_steps"] == 2 and summary["trailing_no_gradient_steps"] == 0
    assert summary["ends_without_gradient"] is False
    assert trailing([True, None, True, True]) == 2 and trailing([]) == 0 and trailing([True, None]) == 0


def test_the_gradient_norm_decides_before_the_zero_std_share():
    # online RFT on all-right groups: zero std, a gradient still
    assert no_gradient({"grad_norm": 0.3, "frac_reward_zero_std": 1.0}) is False
    assert no_gradient({"grad_norm": 0.0, "frac_reward_zero_std": 0.5}) is True
    assert no_gradient({"frac_reward_zero_std": 1.0}) is True  # no norm logged: every group zero-std
    assert no_gradient({"grad_norm": float("nan"), "frac_reward_zero_std": 0.75}) is False
    assert no_gradient({"reward": 0.0}) is None


def test_an_offline_log_has_no_summary():
    sft = [
        {"step": 0, "eval/pass@1": 0.1},
        {"step": 1, "loss": 1.2, "grad_norm": 0.5, "mean_token_accuracy": 0.6, "entropy": 1.0},
        {"step": 1, "train_loss": 1.2, "train_runtime": 3.0},
    ]
    dpo = [{"step": 1, "loss": 0.69, "rewards/chosen": 0.1, "rewards/margins": 0.05, "grad_norm": 0.2}]
    assert summarize(sft) is None and summarize(dpo) is None and summarize([]) is None


def test_missing_and_non_finite_values_are_skipped():
    history = [
        {"step": 1, "reward": 0.5, "grad_norm": None, "frac_reward_zero_std": 0.5, "completions/mean_length": math.nan},
        {"step": 2, "reward": math.nan, "grad_norm": 0.0},  # no finite reward: not a training step
        {"step": 3, "reward": 0.0, "completions/mean_length": 20.0, "completions/clipped_ratio": 0.0},
        {
            "step": 4,
            "reward": 0.25,
            "grad_norm": math.inf,
            "frac_reward_zero_std": 1.0,
            "completions/clipped_ratio": None,
        },
        "not an entry",
    ]
    summary = summarize(history)
    assert summary == {
        "steps": 3,
        "no_gradient_steps": 1,  # step 4, by its zero-std share (its norm is not finite); step 3 unknown
        "trailing_no_gradient_steps": 1,
        "ends_without_gradient": True,
        "all_zero_std_steps": 1,
        "mean_reward": 0.25,
        "first_mean_length": 20.0,
        "last_mean_length": 20.0,
        "first_clipped_ratio": 0.0,
        "last_clipped_ratio": 0.0,
    }
    json.dumps(summary, allow_nan=False)  # no NaN anywhere
    bare = summarize([{"step": 1, "reward": 0.0}])
    assert bare["first_mean_length"] is None and bare["no_gradient_steps"] == 0
    assert "| – | – |" in "\n".join(
        render_dynamics([_run("a", "lr0.001", 0, "test", False, [{"step": 1, "reward": 0}])])
    )


def _run(arm, setting, seed, role, picked, history):
    return {
        "arm": arm,
        "setting": setting,
        "seed": seed,
        "role": role,
        "picked": picked,
        "summary": summarize(history),
        "series": series(history),
    }


def test_the_section_and_the_plot():
    runs = [_run("grpo_outcome", "lr0.001", 100, "search", True, COLLAPSE)]
    runs.append(_run("grpo_outcome", "lr0.001", 0, "test", True, COLLAPSE[:3]))
    lines = render_dynamics(runs)
    assert lines[0] == "## Training dynamics of the online arms (from the training logs)"
    assert "| grpo_outcome | lr0.001 (pick) | 100 (search) | 4 | 2 | 2 | 0.094 | 30.0 → 64.0 | 0.250 → 1.000 |" in lines
    assert "| grpo_outcome | lr0.001 (pick) | 0 | 2 | 0 | 0 | 0.188 | 30.0 → 40.0 | 0.250 → 0.500 |" in lines
    assert "No online run" in "\n".join(render_dynamics([]))
    assert plot_dynamics(runs)[:8] == b"\x89PNG\r\n\x1a\n" and plot_dynamics([]) is None


def test_the_reader_takes_the_search_runs_and_the_picks_test_seeds(tmp_path):
    evaluation = Evaluation(split="validation", limit=4, n=2)
    arms = [
        Arm("sft", "sft"),
        Arm("grpo_outcome", "grpo_outcome"),
        Arm("refill", "grpo_outcome", rate_of="grpo_outcome"),
    ]
    study = Study(arms, [3e-4, 1e-3], [0, 1], 100, evaluation, Evaluation(split="test", limit=4, n=2))
    low, high = Setting((("lr", 3e-4),)), Setting((("lr", 1e-3),))
    picks = {"sft": low, "grpo_outcome": high, "refill": high}
    written = [("sft", low, 100), ("sft", low, 0), ("grpo_outcome", low, 100), ("grpo_outcome", high, 100)]
    written += [("grpo_outcome", high, 0), ("refill", high, 100), ("refill", high, 1)]  # refill's seed 0: no log
    for arm, setting, seed in written:
        folder = study.run_dir(tmp_path, study.arm(arm), setting, seed)
        folder.mkdir(parents=True)
        history = [{"step": 1, "loss": 1.0}] if arm == "sft" else COLLAPSE
        (folder / LOG_FILE).write_text(json.dumps(history))
    rows = read_dynamics(study, tmp_path, picks)
    assert [(r["arm"], r["setting"], r["seed"], r["role"], r["picked"]) for r in rows] == [
        ("grpo_outcome", "lr0.0003", 100, "search", False),
        ("grpo_outcome", "lr0.001", 100, "search", True),
        ("grpo_outcome", "lr0.001", 0, "test", True),
        ("refill", "lr0.001", 100, "search", True),
        ("refill", "lr0.001", 1, "test", True),
    ]
    assert rows[0]["summary"] == summarize(COLLAPSE) and rows[0]["series"]["step"] == [1, 2, 3, 4]
