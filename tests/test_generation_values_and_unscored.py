"""Beside the bad-input table (tests/test_bad_inputs_model_files.py): the sampler backend reads every
generation value as TRL's generate does or refuses it, and a run whose rewards were never scored ends `failed` in the
iterative loop as in scripts/train.py, a reward with weight 0 (logged only) not counting as scored."""

from __future__ import annotations

import json

import pytest

from grpo_ext.cli import run_cli
from grpo_ext.errors import UserError
from grpo_ext.rollouts import sampler_settings
from grpo_ext.tasks.arithmetic import ArithmeticTask
from tests.trainer_utils import tiny_args, tiny_trainer

TRL_KWARGS = dict(max_new_tokens=8, do_sample=True, temperature=0.7, top_p=0.9, top_k=0, min_p=None, eos_token_id=[1])


def read(**changes):
    return sampler_settings(TRL_KWARGS | changes, "eager", [1], 0)


def test_unset_values_are_transformers_defaults():
    """None in TRL's kwargs is what transformers' generate reads then: temperature and top_p 1.0, min_p off."""
    s = read(temperature=None, top_p=None, min_p=None)
    assert (s.temperature, s.top_p, s.top_k, s.min_p) == (1.0, 1.0, 0, None)
    s = read(top_p=0.5, top_k=7, min_p=0.1)
    assert (s.temperature, s.top_p, s.top_k, s.min_p) == (0.7, 0.5, 7, 0.1)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"top_p": 0.0}, r"generation_kwargs\.top_p: must be in \(0, 1\], got 0\.0"),  # was read as 1.0 (full sampling)
        ({"top_k": None}, r"generation_kwargs\.top_k: None is transformers' default top-k"),  # was read as 0 (off)
        ({"top_k": -5}, r"generation_kwargs\.top_k: must be in \[0, inf\)"),
        ({"min_p": 5}, r"generation_kwargs\.min_p: must be in \[0, 1\]"),
        ({"temperature": 0.0}, r"generation_kwargs\.temperature: must be in \(0, inf\)"),
    ],
)
def test_values_the_two_backends_would_read_apart_are_refused(changes, message):
    with pytest.raises(UserError, match=message):
        read(**changes)


def test_greedy_reads_no_sampling_value():
    """do_sample False: transformers takes the argmax and reads none of them, and so does the sampler."""
    s = read(do_sample=False, top_p=0.0, top_k=None)
    assert (s.temperature, s.top_p, s.top_k) == (0.0, 1.0, 0)


def test_a_weight_0_reward_does_not_count_as_scored(tmp_path):
    """A logged-only reward (weight 0) beside a training reward that scored nothing: the run learned nothing."""

    def unscored(completions, **kwargs):
        return [None] * len(completions)

    def logged(completions, **kwargs):
        return [1.0] * len(completions)

    trainer = tiny_trainer(
        args=tiny_args(tmp_path=tmp_path, max_steps=1, reward_weights=[1.0, 0.0]), reward_funcs=[unscored, logged]
    )
    trainer.train()
    with pytest.raises(UserError, match="reward_funcs: no completion was scored"):
        trainer.check_rewards_were_scored()


def test_an_iteration_that_scored_no_reward_fails(tmp_path, monkeypatch, capsys):
    """The iterative loop's GRPO step: a reward source that scored nothing ends the run with one line, the
    iteration's record says `failed` and no iteration is saved as done (it was recorded `complete` before)."""
    from grpo_ext.experiments.iterative import Experiment
    from tests.experiments.iterative.test_loop import quick_args
    from tests.rewards.test_reward_models import make_tiny_policy

    def unscored(self, prompts, completions, **kwargs):
        return [None] * len(prompts)

    monkeypatch.setattr(ArithmeticTask, "outcome_reward", unscored)
    base = make_tiny_policy(tmp_path / "base")
    args = quick_args(tmp_path / "run", base, iterations=1, arms="verifier", seeds="0", reward_model_type="outcome")
    with pytest.raises(SystemExit) as exit_info:
        run_cli(lambda argv: Experiment(*args).run(), [])
    assert exit_info.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "reward_funcs: no completion was scored" in errors[0], errors
    arm = tmp_path / "run" / "seed_0" / "verifier"
    record = json.loads((arm / "iter_1" / "policy.tmp" / "grpo_ext_run.json").read_text())
    assert record["status"] == "failed"
    assert not (arm / "iter_1" / "policy").exists()
    state = arm / "iterative_state.json"
    assert not state.exists() or json.loads(state.read_text())["iteration"] == 0


@pytest.mark.parametrize(
    "fields",
    [{"architectures": ["LlamaForSequenceClassification"]}, {"auto_map": {"AutoModelForCausalLM": "m.Model"}}],
    ids=["a reward model's head", "remote code"],
)
def test_the_config_check_leaves_what_it_cannot_build_to_the_loader(tmp_path, fields):
    """A folder whose model the check cannot build as a causal LM here is not refused by it (no false refusal): the
    loader, or the reward-model loader, reads it. The same edit on a plain causal LM is refused."""
    import shutil

    from grpo_ext.model_files import check_weights
    from grpo_ext.model_paths import EMBEDDED_MODEL_DIR

    folder = tmp_path / "model"
    shutil.copytree(EMBEDDED_MODEL_DIR, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 3, **fields}))
    check_weights(folder, "model")
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 3}))
    with pytest.raises(UserError, match="config.json disagrees with the weights"):
        check_weights(folder, "model")
