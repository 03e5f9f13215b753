"""Device discipline, checked on a CPU: every extension trains a step with its hooks device-strict
(tests/device_strict.py), and a trainer's accelerator and model agree on the device whatever set up accelerate's
process state first. Both bugs were found on a GPU (process mode's step metrics; the iterative loop's workers)."""

from __future__ import annotations

import copy

import pytest
import torch
from accelerate.state import AcceleratorState, PartialState

from tests.device_strict import device_strict
from tests.rewards.test_prm_formats import make_step_tag_prm
from tests.trainer_utils import TASK, GRPOExtTrainer, tiny_args, tiny_trainer

EXTENSIONS = {
    "process": dict(advantage_mode="process"),
    "process_outcome_refill": dict(advantage_mode="process", process_include_outcome=True, zero_std_groups="refill"),
    "skip": dict(zero_std_groups="skip"),
    "refill": dict(zero_std_groups="refill", max_refill_rounds=2),
    "adaptive_kl": dict(kl_controller="adaptive", beta=0.1, target_kl=1e-3, kl_horizon=64),
    "online_rft_skip": dict(advantage_mode="online_rft", zero_std_groups="skip"),
    "sampler": dict(generation_backend="sampler"),
}


@pytest.mark.parametrize("name", list(EXTENSIONS))
def test_every_extension_trains_a_step_device_strict(tmp_path, name):
    overrides = EXTENSIONS[name]
    process = overrides.get("advantage_mode") == "process"
    args = tiny_args(tmp_path=tmp_path, max_steps=1, **overrides)
    trainer = tiny_trainer(args=args, process_reward_funcs=[TASK.step_reward] if process else None)
    with device_strict():
        trainer.train()
    assert trainer.state.global_step == 1
    assert torch.isfinite(torch.tensor([h["loss"] for h in trainer.state.log_history if "loss" in h])).all()


def test_process_mode_with_a_prm_trains_a_step_device_strict(tmp_path):
    prm = make_step_tag_prm(tmp_path / "prm")
    args = tiny_args(tmp_path=tmp_path / "run", max_steps=1, advantage_mode="process", process_reward_model=str(prm))
    trainer = tiny_trainer(args=args)
    with device_strict():
        trainer.train()
    assert trainer.state.global_step == 1


class _StrayTensor(GRPOExtTrainer):
    """Today's grpo-ext with one tensor made without a device, where the GPU found the first one."""

    def _log_step_metrics(self, local_steps, mode):
        present = ~torch.isnan(local_steps)
        torch.stack([present.sum().float(), torch.tensor(float(len(local_steps)))])


def test_the_strict_mode_catches_a_tensor_made_without_a_device(tmp_path):
    args = tiny_args(tmp_path=tmp_path, max_steps=1, advantage_mode="process")
    trainer = tiny_trainer(_StrayTensor, args=args, process_reward_funcs=[TASK.step_reward])
    trainer.train()  # on a CPU, without the strict mode, the stray tensor goes unnoticed
    trainer = tiny_trainer(
        _StrayTensor,
        args=tiny_args(tmp_path=tmp_path / "b", max_steps=1, advantage_mode="process"),
        process_reward_funcs=[TASK.step_reward],
    )
    with device_strict(), pytest.raises(RuntimeError, match="meta"):
        trainer.train()


@pytest.fixture
def gpu_like_default_device(monkeypatch):
    """accelerate's default device (a GPU's on a GPU machine) made ``meta``: a process state set up without
    ``cpu=True`` then disagrees with a ``use_cpu`` config, as cuda:0 does on a GPU machine."""
    monkeypatch.setattr(PartialState, "default_device", property(lambda self: torch.device("meta")))
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def _copied_config_in_a_fresh_process(tmp_path):
    """A `use_cpu` config whose device was read, copied (as the iterative loop copies it, or pickles it to a worker),
    then used where accelerate's state was never set up (a worker process)."""
    args = tiny_args(tmp_path=tmp_path, max_steps=1, beta=0.04)
    assert args.device.type == "cpu"
    AcceleratorState._reset_state(reset_partial_state=True)
    return copy.deepcopy(args)


def _state_set_up_by_someone_else(tmp_path):
    """Another part of the process made the state first, without `cpu=True` (as TRL's model loader does)."""
    args = tiny_args(tmp_path=tmp_path, max_steps=1, beta=0.04)
    AcceleratorState._reset_state(reset_partial_state=True)
    PartialState()
    return args


@pytest.mark.parametrize("setup", [_copied_config_in_a_fresh_process, _state_set_up_by_someone_else])
def test_the_accelerator_follows_the_config_whatever_set_the_process_state_up(tmp_path, gpu_like_default_device, setup):
    args = setup(tmp_path)
    trainer = tiny_trainer(args=args)
    model_device = next(trainer.model.parameters()).device
    assert trainer.accelerator.device == model_device == torch.device("cpu")
    trainer.train()  # TRL's generate meets the model on the accelerator's device
    assert trainer.state.global_step == 1


def test_the_iterative_policy_trainer_keeps_one_device(tmp_path, gpu_like_default_device):
    from grpo_ext.experiments.iterative.policy import build_policy_trainer
    from grpo_ext.model_paths import EMBEDDED_MODEL_DIR

    args = _copied_config_in_a_fresh_process(tmp_path)
    args.advantage_mode = "process"  # the step verifier's scores feed the advantages (a process RM type needs it)
    trainer = build_policy_trainer(
        EMBEDDED_MODEL_DIR, "verifier", "process", TASK, TASK.load("train", 16), args, tmp_path / "it", seed=0
    )
    assert trainer.accelerator.device == next(trainer.model.parameters()).device == torch.device("cpu")
    trainer.train()
    assert trainer.state.global_step == 1


@pytest.mark.parametrize("decode", ["eager", "static"])
def test_the_sampler_makes_no_tensor_without_a_device(tiny_char_llama, decode):
    """The harness's sampler (and so `generation_backend: sampler`) run whole with torch's default device `meta`."""
    from grpo_ext.sampler.sampling import SamplingParams, sample

    model, tokenizer = tiny_char_llama()
    params = SamplingParams(n=4, temperature=1.0, top_p=0.9, max_new_tokens=12, seed=1, decode=decode)
    expected = sample(model, tokenizer, ["1+2=", "33-4="], params, progress=False)
    with torch.device("meta"):
        assert sample(model, tokenizer, ["1+2=", "33-4="], params, progress=False) == expected
