"""Tests for grpo_ext.kl_control: hand-worked adaptive updates, clipping, clamps, NaN, state, validation."""

import json
import math

import pytest

from grpo_ext.kl_control import AdaptiveKLController, FixedKLController


def test_adaptive_hand_worked_sequence():
    c = AdaptiveKLController(init_beta=0.1, target_kl=0.05, horizon=100)
    # kl 0.1: e = clip(0.1 / 0.05 - 1, -0.2, 0.2) = clip(1) = 0.2; beta = 0.1 * (1 + 0.2 * 10 / 100) = 0.102
    assert c.update(0.1, 10) == pytest.approx(0.102, rel=1e-12)
    assert c.beta == pytest.approx(0.102, rel=1e-12)
    # kl 0: e = clip(-1) = -0.2; beta = 0.102 * (1 - 0.02) = 0.09996
    assert c.update(0.0, 10) == pytest.approx(0.09996, rel=1e-12)
    # kl 0.055: e = 0.055 / 0.05 - 1 = 0.1 (not clipped); beta = 0.09996 * (1 + 0.1 * 10 / 100) = 0.1009596
    assert c.update(0.055, 10) == pytest.approx(0.1009596, rel=1e-12)
    # kl on target: e = 0, beta unchanged whatever n_samples
    assert c.update(0.05, 50) == pytest.approx(0.1009596, rel=1e-12)
    # kl 0.04: e = -0.2 exactly at the clip; n = 25: beta = 0.1009596 * (1 - 0.2 * 0.25) = 0.09591162
    assert c.update(0.04, 25) == pytest.approx(0.09591162, rel=1e-12)
    # n_samples = 0: no step
    assert c.update(10.0, 0) == pytest.approx(0.09591162, rel=1e-12)


def test_adaptive_error_is_clipped():
    # KL 1e9 times the target moves beta exactly as much as 1.2 times the target.
    huge = AdaptiveKLController(1.0, target_kl=1.0, horizon=10)
    clipped = AdaptiveKLController(1.0, target_kl=1.0, horizon=10)
    assert huge.update(1e9, 10) == clipped.update(1.2, 10) == pytest.approx(1.2)
    assert huge.update(-5.0, 10) == clipped.update(0.8, 10) == pytest.approx(1.2 * 0.8)


def test_adaptive_clamps_to_bounds():
    c = AdaptiveKLController(0.1, target_kl=0.05, horizon=100, beta_min=0.09, beta_max=0.11)
    assert c.update(1.0, 100) == pytest.approx(0.11)  # 0.1 * 1.2 = 0.12 -> 0.11
    assert c.update(0.0, 100) == pytest.approx(0.09)  # 0.11 * 0.8 = 0.088 -> 0.09
    assert c.update(0.0, 100) == pytest.approx(0.09)


def test_adaptive_non_positive_factor_clamps_to_beta_min_and_zero_stays_zero():
    c = AdaptiveKLController(0.1, target_kl=0.05, horizon=100)
    assert c.update(0.0, 1000) == 0.0  # factor 1 - 0.2 * 10 = -1 -> clamped to beta_min = 0
    assert c.update(1.0, 100) == 0.0  # multiplicative: 0 stays 0


@pytest.mark.parametrize("kl", [float("nan"), float("inf"), -float("inf")])
def test_adaptive_non_finite_kl_leaves_beta_unchanged(kl):
    c = AdaptiveKLController(0.1, target_kl=0.05, horizon=100)
    c.update(0.1, 10)
    assert c.update(kl, 10) == pytest.approx(0.102)
    assert c.beta == pytest.approx(0.102) and math.isfinite(c.beta)
    assert c.update(0.1, 10) == pytest.approx(0.102 * 1.02)  # and later updates still work


def test_adaptive_accepts_tensor_like_numbers():
    import torch

    c = AdaptiveKLController(0.1, target_kl=0.05, horizon=100)
    assert c.update(torch.tensor(0.1), 10) == pytest.approx(0.102)


def test_adaptive_state_dict_round_trip_through_json():
    c = AdaptiveKLController(0.1, target_kl=0.05, horizon=100)
    c.update(0.1, 10)
    text = json.dumps(c.state_dict(), allow_nan=False)  # strict JSON: beta_max=inf is stored as null
    restored = AdaptiveKLController(0.5, target_kl=1.0, horizon=7, beta_min=0.2, beta_max=0.9)
    restored.load_state_dict(json.loads(text))
    assert restored.state_dict() == c.state_dict()
    assert restored.beta == c.beta and restored.beta_max == math.inf
    for kl in (0.0, 0.07, 0.3):  # the two now evolve identically
        assert restored.update(kl, 10) == c.update(kl, 10)

    bounded = AdaptiveKLController(0.1, target_kl=0.05, horizon=100, beta_min=0.01, beta_max=1.0)
    again = AdaptiveKLController(0.1, target_kl=0.05, horizon=100)
    again.load_state_dict(json.loads(json.dumps(bounded.state_dict(), allow_nan=False)))
    assert (again.beta_min, again.beta_max) == (0.01, 1.0)


def test_fixed_controller():
    c = FixedKLController(0.04)
    assert c.update(123.0, 10) == 0.04 and c.update(float("nan"), 10) == 0.04
    assert c.beta == 0.04
    assert FixedKLController(0.0).beta == 0.0  # TRL's default beta
    restored = FixedKLController(1.0)
    restored.load_state_dict(json.loads(json.dumps(c.state_dict(), allow_nan=False)))
    assert restored.beta == 0.04


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"init_beta": 0.0}, "init_beta"),
        ({"init_beta": -0.1}, "init_beta"),
        ({"init_beta": float("nan")}, "init_beta"),
        ({"target_kl": 0.0}, r"target_kl must be > 0, got 0.0"),
        ({"target_kl": -1.0}, "target_kl"),
        ({"target_kl": float("inf")}, "target_kl"),
        ({"horizon": 0}, r"horizon must be > 0, got 0"),
        ({"horizon": "ten"}, "horizon"),
        ({"beta_min": -0.1}, "beta_min"),
        ({"beta_min": 0.5, "beta_max": 0.2}, "beta_min"),
        ({"beta_min": 0.2}, "init_beta"),  # init_beta 0.1 below beta_min
        ({"beta_max": 0.05}, "init_beta"),  # init_beta 0.1 above beta_max
    ],
)
def test_adaptive_validation(kwargs, message):
    arguments = {"init_beta": 0.1, "target_kl": 0.05, "horizon": 100} | kwargs
    with pytest.raises(ValueError, match=message):
        AdaptiveKLController(**arguments)


def test_update_and_load_validation():
    c = AdaptiveKLController(0.1, target_kl=0.05, horizon=100)
    with pytest.raises(ValueError, match="n_samples"):
        c.update(0.1, -1)
    with pytest.raises(ValueError, match="current_kl"):
        c.update("high", 10)
    with pytest.raises(ValueError, match="'fixed'"):
        c.load_state_dict(FixedKLController(0.1).state_dict())
    with pytest.raises(ValueError, match="missing horizon"):
        c.load_state_dict({k: v for k, v in c.state_dict().items() if k != "horizon"})
    with pytest.raises(ValueError, match="target_kl"):
        c.load_state_dict(c.state_dict() | {"target_kl": -1.0, "beta": 5.0})
    assert c.beta == 0.1 and c.target_kl == 0.05  # a rejected dict changes nothing
    with pytest.raises(ValueError, match="beta"):
        FixedKLController(-0.1)
    with pytest.raises(ValueError, match="'adaptive'"):
        FixedKLController(0.1).load_state_dict(c.state_dict())


def test_registry_builds_each_controller_from_a_config_and_names_the_field_on_an_unknown_one():
    from types import SimpleNamespace

    from grpo_ext.kl_control import KL_CONTROLLERS, get_kl_controller, new_kl_controller

    assert list(KL_CONTROLLERS) == ["fixed", "adaptive"]
    config = SimpleNamespace(beta=0.1, target_kl=0.05, kl_horizon=100, beta_min=0.01, beta_max=None)
    fixed = new_kl_controller(SimpleNamespace(**vars(config), kl_controller="fixed"))
    assert isinstance(fixed, FixedKLController) and fixed.beta == 0.1
    adaptive = new_kl_controller(SimpleNamespace(**vars(config), kl_controller="adaptive"))
    assert isinstance(adaptive, AdaptiveKLController) and adaptive.beta_max == math.inf and adaptive.beta_min == 0.01
    # every entry's saved state carries its registry name, so a checkpoint names the controller that ran
    for name, spec in KL_CONTROLLERS.items():
        assert spec.from_config(config).state_dict()["type"] == name
    assert not get_kl_controller("fixed").moves_beta and get_kl_controller("adaptive").moves_beta
    with pytest.raises(ValueError, match="kl_controller: unknown value 'pid'; expected one of fixed, adaptive"):
        get_kl_controller("pid")


def test_resume_rule_the_config_wins_and_says_how_it_differs():
    adaptive = AdaptiveKLController(0.1, target_kl=0.05, horizon=100, beta_min=0.01, beta_max=0.5)
    saved = AdaptiveKLController(0.3, target_kl=0.02, horizon=100, beta_min=0.01, beta_max=0.5).state_dict()
    assert adaptive.resume(saved) == ["target_kl: the checkpoint used 0.02; this run uses the config's 0.05"]
    assert adaptive.beta == 0.3  # the checkpoint's beta, within the config's bounds
    tight = AdaptiveKLController(0.1, target_kl=0.05, horizon=100, beta_min=0.01, beta_max=0.2)
    notes = tight.resume(saved)
    assert (
        tight.beta == 0.2
        and notes[-1] == "beta: the checkpoint's adaptive beta 0.3 is clamped to 0.2 (the config's bounds)"
    )
    fresh = AdaptiveKLController(0.1, target_kl=0.05, horizon=100)
    assert fresh.resume({"type": "fixed", "beta": 0.04}) == [
        "kl_controller: the checkpoint ran a fixed beta=0.04; the adaptive controller starts at the config's beta=0.1"
    ]
    assert fresh.beta == 0.1
    fixed = FixedKLController(0.04)
    assert fixed.resume({"type": "fixed", "beta": 0.04}) == []
    assert fixed.resume(saved) == [
        "beta: the checkpoint ran a adaptive beta (last 0.3); this run uses the config's fixed beta=0.04"
    ]
    assert fixed.beta == 0.04
    with pytest.raises(ValueError, match="target_kl"):
        fresh.resume(saved | {"target_kl": -1.0})
