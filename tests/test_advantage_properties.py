"""Properties of the advantage math (grpo_ext.advantage_math) on random batches (hypothesis): finite outputs, zero
where a group has no signal, zero group means, shift and scale invariance, the loop reference."""

import torch
from hypothesis import given
from hypothesis import strategies as st

from grpo_ext.advantages import outcome_advantages, process_advantages, zero_std_mask
from tests.test_advantage_math import NAN, PROPERTY, process_reference

WIDE = st.floats(-1e6, 1e6, width=32)  # any finite value a reward function might plausibly return
GRID = st.integers(-40, 40).map(lambda k: k / 4)  # exact in float32: well-conditioned statistics
MISSING = st.just(NAN)


@st.composite
def outcome_batches(draw, values):
    group_size = draw(st.integers(1, 6))
    num_groups = draw(st.integers(0, 5))
    per_group = []
    for _ in range(num_groups):
        if draw(st.booleans()):  # an all-equal group (possibly with missing rewards)
            value = draw(values)
            per_group += [draw(st.sampled_from([value, NAN])) for _ in range(group_size)]
        else:
            per_group += draw(st.lists(st.one_of(values, MISSING), min_size=group_size, max_size=group_size))
    return torch.tensor(per_group, dtype=torch.float32), group_size


@st.composite
def process_batches(draw, values):
    group_size = draw(st.integers(1, 4))
    num_groups = draw(st.integers(0, 3))
    t = draw(st.integers(0, 8))
    cells = st.one_of(MISSING, MISSING, MISSING, values)  # mostly "no step here"
    if draw(st.booleans()):
        cells = st.one_of(MISSING, MISSING, st.just(draw(values)))  # every step of the batch equal
    flat = draw(st.lists(cells, min_size=num_groups * group_size * t, max_size=num_groups * group_size * t))
    return torch.tensor(flat, dtype=torch.float32).view(num_groups * group_size, t), group_size


@PROPERTY
@given(outcome_batches(WIDE), st.booleans())
def test_property_outcome_finite_and_zero_where_no_signal(batch, scale):
    rewards, group_size = batch
    advantages = outcome_advantages(rewards, group_size, scale=scale)
    assert advantages.shape == rewards.shape
    assert bool(torch.isfinite(advantages).all())
    assert bool((advantages[torch.isnan(rewards)] == 0).all())
    no_signal = zero_std_mask(rewards, group_size).repeat_interleave(group_size)
    assert bool((advantages[no_signal] == 0).all())


@PROPERTY
@given(outcome_batches(GRID), st.booleans())
def test_property_outcome_group_mean_is_zero(batch, scale):
    rewards, group_size = batch
    advantages = outcome_advantages(rewards, group_size, scale=scale).view(-1, group_size)
    present = ~torch.isnan(rewards.view(-1, group_size))
    # Over the finite rewards of each group the advantages sum to 0 (missing ones are 0 anyway).
    sums = torch.where(present, advantages, 0.0).sum(1)
    torch.testing.assert_close(sums, torch.zeros_like(sums), rtol=0, atol=1e-4)
    # And zero_std_mask is exactly "every advantage of the group is 0" on well-conditioned rewards.
    assert torch.equal(zero_std_mask(rewards, group_size), (advantages == 0).all(1))


@PROPERTY
@given(outcome_batches(GRID), st.integers(-100, 100), st.booleans())
def test_property_outcome_shift_invariance(batch, shift, scale):
    # Exact in real arithmetic; in float32 the shifted mean rounds at ulp(~100) ~ 8e-6, which a std as
    # small as 0.25 / sqrt(6) ~ 0.1 turns into ~1e-4 of advantage.
    rewards, group_size = batch
    torch.testing.assert_close(
        outcome_advantages(rewards + shift, group_size, scale=scale),
        outcome_advantages(rewards, group_size, scale=scale),
        rtol=0,
        atol=1e-3,
    )


@PROPERTY
@given(outcome_batches(st.integers(-10, 10).map(float)), st.floats(1.0, 100.0))
def test_property_outcome_scale_invariance(batch, factor):
    # (c r - c m) / (c s + eps) = (r - m) / (s + eps / c): a relative change of at most ~eps / s, so the
    # test needs s >> eps. Integer rewards that are not all equal have s >= 1 / sqrt(g) (one reward off by
    # 1 among g <= 6: s = 1 / sqrt(g) ~ 0.41), so the change is <= 2.5e-4 relative, inside the 1e-3 bound.
    rewards, group_size = batch
    before = outcome_advantages(rewards, group_size)
    after = outcome_advantages(rewards * factor, group_size)
    assert bool(((after - before).abs() <= 1e-3 * before.abs() + 1e-5).all())


@PROPERTY
@given(process_batches(WIDE), st.booleans())
def test_property_process_finite_and_zero_after_last_step(batch, scale):
    step_rewards, group_size = batch
    advantages = process_advantages(step_rewards, group_size, scale=scale)
    assert advantages.shape == step_rewards.shape and advantages.dtype == torch.float32
    assert bool(torch.isfinite(advantages).all())
    # Tokens after the last step of their row (all tokens of rows without a step) are 0.
    has_step = ~torch.isnan(step_rewards)
    at_or_before_last_step = has_step.flip(1).cummax(1).values.flip(1) if step_rewards.shape[1] else has_step
    assert bool((advantages[~at_or_before_last_step] == 0).all())
    no_signal = zero_std_mask(step_rewards, group_size).repeat_interleave(group_size)
    assert bool((advantages[no_signal] == 0).all())


@PROPERTY
@given(process_batches(GRID), st.booleans())
def test_property_process_equals_loop_reference(batch, scale):
    step_rewards, group_size = batch
    torch.testing.assert_close(
        process_advantages(step_rewards, group_size, scale=scale),
        process_reference(step_rewards, group_size, scale=scale).float(),
        # float32 vs float64: the group mean rounds at ~6e-7 for |r| <= 10, divided by a std as small as
        # ~0.04 and summed over up to 8 steps.
        rtol=1e-4,
        atol=2e-4,
    )


@PROPERTY
@given(process_batches(GRID), st.integers(-100, 100))
def test_property_process_shift_invariance(batch, shift):
    # As for outcome, plus accumulation: up to 8 steps in a row, each off by ulp(~100) / std with std as
    # small as 0.25 / sqrt(32) ~ 0.04 (one step off among 32) -> a few 1e-3 at worst.
    step_rewards, group_size = batch
    torch.testing.assert_close(
        process_advantages(step_rewards + shift, group_size),
        process_advantages(step_rewards, group_size),
        rtol=0,
        atol=5e-3,
    )
