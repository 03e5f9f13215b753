"""The gradient-coefficient registry (grpo_ext.advantages): its entries, names, re-registration and inputs."""

import pytest
import torch

from grpo_ext.advantages import (
    GRADIENT_COEFFICIENTS,
    get_gradient_coefficient,
    outcome_advantages,
    process_advantages,
    register_gradient_coefficient,
)
from tests.test_advantage_math import NAN, TWO_OUTPUTS


def test_registry_holds_the_three_methods():
    assert {"outcome", "process", "online_rft"} <= set(GRADIENT_COEFFICIENTS)
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.5])
    torch.testing.assert_close(
        get_gradient_coefficient("outcome")(rewards=rewards, step_rewards=None, group_size=2),
        outcome_advantages(rewards, 2),
    )
    torch.testing.assert_close(
        get_gradient_coefficient("outcome")(rewards=rewards, group_size=2, scale=False),
        outcome_advantages(rewards, 2, scale=False),
    )
    torch.testing.assert_close(
        get_gradient_coefficient("process")(rewards=None, step_rewards=TWO_OUTPUTS, group_size=2, eps=0.0),
        process_advantages(TWO_OUTPUTS, 2, eps=0.0),
    )


def test_online_rft_coefficients_hand_batch():
    # correct iff reward > 0; a missing (NaN) reward is not correct. No group statistics.
    rewards = torch.tensor([1.0, 0.0, NAN, 0.5, -1.0, 1.0])
    gc = get_gradient_coefficient("online_rft")(rewards=rewards, step_rewards=None, group_size=3)
    assert torch.equal(gc, torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 1.0]))
    assert gc.dtype == torch.float32


def test_registry_unknown_name_lists_known_ones():
    expected = r"advantage_mode: unknown value 'nope'; expected one of outcome, process, online_rft"
    with pytest.raises(ValueError, match=expected):
        get_gradient_coefficient("nope")


def test_registry_rejects_a_second_function_under_a_taken_name():
    with pytest.raises(ValueError, match="already registered"):

        @register_gradient_coefficient("outcome")
        def other(*, rewards=None, step_rewards=None, group_size, scale=True, eps=1e-4):
            return rewards

    @register_gradient_coefficient("test_constant")
    def constant(*, rewards=None, step_rewards=None, group_size, scale=True, eps=1e-4):
        return torch.ones_like(rewards)

    try:
        assert get_gradient_coefficient("test_constant").fn is constant
    finally:
        del GRADIENT_COEFFICIENTS["test_constant"]


def test_gradient_coefficients_need_their_input_and_keywords():
    with pytest.raises(ValueError, match="'outcome' needs rewards"):
        get_gradient_coefficient("outcome")(rewards=None, step_rewards=TWO_OUTPUTS, group_size=2)
    with pytest.raises(ValueError, match="'process' needs step_rewards"):
        get_gradient_coefficient("process")(rewards=torch.zeros(2), step_rewards=None, group_size=2)
    with pytest.raises(ValueError, match="'online_rft' needs rewards"):
        get_gradient_coefficient("online_rft")(rewards=None, step_rewards=None, group_size=2)
    with pytest.raises(TypeError):
        get_gradient_coefficient("outcome")(torch.zeros(2), None, 2)  # keyword-only


def test_a_registered_mode_is_reachable_from_the_config(tmp_path):
    from grpo_ext.config import GRPOExtConfig

    with pytest.raises(ValueError, match="advantage_mode: unknown value 'half_outcome'"):
        GRPOExtConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, advantage_mode="half_outcome")

    @register_gradient_coefficient("half_outcome", needs_step_rewards=False)
    def half_outcome(*, rewards=None, step_rewards=None, group_size, scale=True, eps=1e-4):
        """Half of GRPO's outcome advantages."""
        return 0.5 * outcome_advantages(rewards, group_size, scale=scale, eps=eps)

    try:
        config = GRPOExtConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, advantage_mode="half_outcome")
        entry = get_gradient_coefficient(config.advantage_mode)
        assert entry.description == "Half of GRPO's outcome advantages."
        assert not entry.keeps_trl_advantages and not entry.needs_step_rewards
        rewards = torch.tensor([1.0, 0.0])
        torch.testing.assert_close(entry(rewards=rewards, group_size=2), 0.5 * outcome_advantages(rewards, 2))
    finally:
        del GRADIENT_COEFFICIENTS["half_outcome"]
