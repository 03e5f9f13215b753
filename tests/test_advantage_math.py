"""The advantage math (grpo_ext.advantage_math, imported from its public home grpo_ext.advantages): TRL parity,
hand-worked process examples, loop references, validation, properties. The registry: tests/test_advantages.py."""

import math

import pytest
import torch
from hypothesis import HealthCheck, settings

from grpo_ext.advantages import (
    cap_to_right_samples,
    get_gradient_coefficient,
    outcome_advantages,
    process_advantages,
    zero_std_mask,
)

NAN = float("nan")
PROPERTY = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------------------------------------------------
# References
# ------------------------------------------------------------------------------------------------------------


def trl_nanstd(tensor: torch.Tensor, dim: int) -> torch.Tensor:
    """trl.trainer.utils.nanstd (TRL 1.16), copied: importing trl takes seconds."""
    mean = torch.nanmean(tensor, dim=dim, keepdim=True)
    variance = torch.nanmean((tensor - mean) ** 2, dim=dim, keepdim=True)
    count = torch.sum(~torch.isnan(tensor), dim=dim, keepdim=True)
    correction = count / (count - 1)
    correction = torch.where(count > 1, correction, torch.full_like(correction, float("nan")))
    variance *= correction
    return torch.sqrt(variance).squeeze(dim)


def trl_advantages(rewards: torch.Tensor, num_generations: int, scale: bool = True) -> torch.Tensor:
    """TRL 1.16 GRPOTrainer._generate_and_score_completions, sum_then_normalize, scale_rewards group/none."""
    mean_grouped_rewards = torch.nanmean(rewards.view(-1, num_generations), dim=1)
    mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(num_generations, dim=0)
    if num_generations > 1:
        std_rewards = trl_nanstd(rewards.view(-1, num_generations), dim=1)
        std_rewards = std_rewards.repeat_interleave(num_generations, dim=0)
    else:
        std_rewards = torch.zeros_like(rewards)
    advantages = rewards - mean_grouped_rewards
    if scale:
        advantages = advantages / (std_rewards + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0)


def process_reference(step_rewards: torch.Tensor, group_size: int, eps: float = 1e-4, scale: bool = True):
    """DeepSeekMath 4.1.3 read literally, one sequence and one token at a time, in float64."""
    x = step_rewards.double()
    n, t = x.shape
    out = torch.zeros(n, t, dtype=torch.float64)
    for start in range(0, n, group_size):
        rows = range(start, start + group_size)
        steps = [x[i, j].item() for i in rows for j in range(t) if not math.isnan(x[i, j].item())]
        if len(steps) < 2 or len(set(steps)) == 1:
            continue  # no signal: zeros
        mean = sum(steps) / len(steps)
        std = math.sqrt(sum((r - mean) ** 2 for r in steps) / (len(steps) - 1))
        for i in rows:
            running = 0.0  # sum of normalised rewards of the steps ending at or after token j
            for j in reversed(range(t)):
                r = x[i, j].item()
                if not math.isnan(r):
                    running += (r - mean) / (std + eps) if scale else r - mean
                out[i, j] = running
    return out


def random_step_rewards(generator: torch.Generator, n: int, t: int, max_steps: int, grid: bool = True):
    """Ragged rows: random length, random number of steps (maybe 0) at random distinct token indices."""
    x = torch.full((n, t), NAN)
    for i in range(n):
        length = int(torch.randint(0, t + 1, (), generator=generator))
        k = int(torch.randint(0, min(max_steps, length) + 1, (), generator=generator))
        ends = torch.randperm(length, generator=generator)[:k]
        if grid:  # multiples of 1/4: exact in float32, so float32 and float64 statistics agree closely
            x[i, ends] = torch.randint(-8, 9, (k,), generator=generator).float() / 4
        else:
            x[i, ends] = torch.randn(k, generator=generator)
    return x


# ------------------------------------------------------------------------------------------------------------
# outcome_advantages
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("group_size", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("scale", [True, False])
def test_outcome_is_bit_identical_to_trl(group_size, scale):
    generator = torch.Generator().manual_seed(group_size)
    rewards = torch.randn(64 * group_size, generator=generator) * 3 + 1
    expected = trl_advantages(rewards, group_size, scale)
    assert torch.equal(outcome_advantages(rewards, group_size, scale=scale), expected)


def test_outcome_matches_trl_on_binary_and_missing_rewards():
    generator = torch.Generator().manual_seed(0)
    binary = torch.randint(0, 2, (256,), generator=generator).float()  # many all-equal groups
    assert torch.equal(outcome_advantages(binary, 8), trl_advantages(binary, 8))
    rewards = torch.randn(256, generator=generator)
    rewards[torch.rand(256, generator=generator) < 0.3] = NAN  # some groups keep < 2 finite rewards
    assert torch.equal(outcome_advantages(rewards, 4), trl_advantages(rewards, 4))


def test_outcome_matches_torch_std_definition():
    rewards = torch.tensor([1.0, 2.0, 4.0, 0.5, 0.0, 0.0])
    grouped = rewards.view(2, 3)
    expected = (grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)
    torch.testing.assert_close(outcome_advantages(rewards, 3), expected.view(-1))


def test_outcome_hand_example_with_missing_rewards():
    # group 0: [1, 0, NaN, 1] -> finite {1, 0, 1}: mean 2/3, Bessel var = (2*(1/3)^2 + (2/3)^2)/2 = 1/3
    # group 1: [NaN, 5, NaN, NaN] -> one finite reward: no baseline, all 0
    # group 2: [3, 3, 3, 3] -> all equal: 0
    rewards = torch.tensor([1.0, 0.0, NAN, 1.0, NAN, 5.0, NAN, NAN, 3.0, 3.0, 3.0, 3.0])
    s = math.sqrt(1 / 3) + 1e-4
    expected = torch.tensor([(1 / 3) / s, (-2 / 3) / s, 0.0, (1 / 3) / s] + [0.0] * 8)
    torch.testing.assert_close(outcome_advantages(rewards, 4), expected)
    # scale=False only centres
    expected_centred = torch.tensor([1 / 3, -2 / 3, 0.0, 1 / 3] + [0.0] * 8)
    torch.testing.assert_close(outcome_advantages(rewards, 4, scale=False), expected_centred)


def test_outcome_all_equal_group_is_exactly_zero_where_trl_leaves_rounding_noise():
    # The float32 mean of three copies of 1000.1 is one ulp off; TRL turns that into a sizeable advantage.
    rewards = torch.full((3,), 1000.1)
    assert trl_advantages(rewards, 3).abs().max() > 0.1
    assert torch.equal(outcome_advantages(rewards, 3), torch.zeros(3))


def test_outcome_dtypes():
    assert outcome_advantages(torch.tensor([0.0, 1.0]).half(), 2).dtype == torch.float32
    assert outcome_advantages(torch.tensor([0.0, 1.0]).bfloat16(), 2).dtype == torch.float32
    assert outcome_advantages(torch.tensor([0.0, 1.0], dtype=torch.float64), 2).dtype == torch.float64
    assert outcome_advantages(torch.tensor([0, 1]), 2).dtype == torch.float32
    assert outcome_advantages(torch.zeros(0), 4).shape == (0,)


# ------------------------------------------------------------------------------------------------------------
# process_advantages: hand-worked examples
# ------------------------------------------------------------------------------------------------------------

# One group of 2 outputs, T = 7, steps ending at different tokens (NaN = no step ends here):
#   output 0: steps end at t=1 (r=1), t=3 (r=0), t=5 (r=1); t=6 is after its last step
#   output 1: steps end at t=2 (r=0), t=6 (r=1)  (a step on the last token)
# All 5 step rewards {1, 0, 1, 0, 1}: mean 0.6, Bessel var = (3 * 0.4^2 + 2 * 0.6^2) / 4 = 1.2 / 4 = 0.3
#   normalised: r=1 -> p = 0.4 / (sqrt(0.3) + eps) ~ 0.730,  r=0 -> q = -0.6 / (sqrt(0.3) + eps) ~ -1.095
# A[i, t] = sum of the normalised rewards of output i's steps ending at or after t.
TWO_OUTPUTS = torch.tensor(
    [
        [NAN, 1.0, NAN, 0.0, NAN, 1.0, NAN],
        [NAN, NAN, 0.0, NAN, NAN, NAN, 1.0],
    ]
)


def two_outputs_expected(p: float, q: float) -> torch.Tensor:
    return torch.tensor(
        [
            # t=0,1: all three steps; t=2,3: steps at 3 and 5; t=4,5: step at 5; t=6: none left
            [p + q + p, p + q + p, q + p, q + p, p, p, 0.0],
            # t=0..2: steps at 2 and 6; t=3..6: step at 6
            [q + p, q + p, q + p, p, p, p, p],
        ]
    )


def test_process_hand_example_steps_ending_at_different_tokens():
    s = math.sqrt(0.3) + 1e-4
    expected = two_outputs_expected(p=0.4 / s, q=-0.6 / s)
    torch.testing.assert_close(process_advantages(TWO_OUTPUTS, group_size=2), expected)


def test_process_hand_example_without_scaling():
    # scale=False: p = 1 - 0.6 = 0.4, q = 0 - 0.6 = -0.6
    expected = two_outputs_expected(p=0.4, q=-0.6)
    torch.testing.assert_close(process_advantages(TWO_OUTPUTS, group_size=2, scale=False), expected)


def test_process_hand_example_ragged_group_of_three():
    # output 0: steps at t=0 (r=2), t=2 (r=4); output 1: step at t=1 (r=0); output 2: no step at all.
    # Steps {2, 4, 0}: mean 2, Bessel var = (0 + 4 + 4) / 2 = 4, std 2.
    #   normalised: 2 -> 0, 4 -> u = 2 / (2 + eps), 0 -> -u
    x = torch.tensor(
        [
            [2.0, NAN, 4.0, NAN, NAN],
            [NAN, 0.0, NAN, NAN, NAN],
            [NAN, NAN, NAN, NAN, NAN],
        ]
    )
    u = 2 / (2 + 1e-4)
    expected = torch.tensor(
        [
            [0 + u, u, u, 0.0, 0.0],  # t=0: steps at 0 and 2; t=1,2: step at 2; then nothing
            [-u, -u, 0.0, 0.0, 0.0],  # t=0,1: step at 1
            [0.0, 0.0, 0.0, 0.0, 0.0],  # no step
        ]
    )
    torch.testing.assert_close(process_advantages(x, group_size=3), expected)


def test_process_group_with_one_step_or_none_is_zero():
    x = torch.tensor(
        [
            [NAN, NAN, 5.0, NAN],  # group 0: a single step in total
            [NAN, NAN, NAN, NAN],
            [NAN, NAN, NAN, NAN],  # group 1: no step at all
            [NAN, NAN, NAN, NAN],
            [1.0, NAN, 3.0, NAN],  # group 2: steps {1, 3, 2}: mean 2, std 1 -> -1, +1, 0 (over 1 + eps)
            [NAN, 2.0, NAN, NAN],
        ]
    )
    v = 1 / (1 + 1e-4)
    expected = torch.zeros(6, 4)
    expected[4] = torch.tensor([-v + v, v, v, 0.0])
    expected[5] = torch.tensor([0.0, 0.0, 0.0, 0.0])
    out = process_advantages(x, group_size=2)
    torch.testing.assert_close(out, expected)
    assert out.dtype == torch.float32


def test_process_all_equal_steps_are_exactly_zero():
    x = torch.tensor([[1000.1, NAN, 1000.1], [NAN, 1000.1, NAN]])
    assert torch.equal(process_advantages(x, group_size=2), torch.zeros(2, 3))


def test_process_empty_shapes():
    assert process_advantages(torch.zeros(0, 5), 4).shape == (0, 5)
    out = process_advantages(torch.zeros(4, 0), 2)
    assert out.shape == (4, 0) and out.dtype == torch.float32
    assert torch.equal(process_advantages(torch.full((4, 3), NAN), 2), torch.zeros(4, 3))


def test_process_half_input_gives_float32_result_of_the_same_values():
    x = random_step_rewards(torch.Generator().manual_seed(3), 16, 20, 5)  # grid values are exact in fp16
    out = process_advantages(x.half(), 4)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, process_advantages(x, 4))
    assert process_advantages(x.double(), 4).dtype == torch.float32


def test_process_batch_of_groups_equals_groups_computed_separately():
    # Statistics are per group, so two groups in one batch must give the per-group results concatenated
    # (this is why the trainer gathers across processes before calling: a split group would not).
    generator = torch.Generator().manual_seed(7)
    first = random_step_rewards(generator, 4, 12, 4, grid=False)
    second = random_step_rewards(generator, 4, 12, 7, grid=False)  # a different K (most steps in a row)
    together = process_advantages(torch.cat([first, second]), group_size=4)
    separately = torch.cat([process_advantages(first, 4), process_advantages(second, 4)])
    torch.testing.assert_close(together, separately, rtol=1e-6, atol=1e-6)
    # Splitting one group into halves is *not* the same computation: it must differ.
    halves = torch.cat([process_advantages(first[:2], 2), process_advantages(first[2:], 2)])
    assert not torch.allclose(halves, process_advantages(first, 4))


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("scale", [True, False])
def test_process_equals_per_sequence_loop_reference(seed, scale):
    generator = torch.Generator().manual_seed(seed)
    group_size = [1, 2, 3, 4][seed % 4]
    x = random_step_rewards(generator, 6 * group_size, 25, 6, grid=seed % 2 == 0)
    expected = process_reference(x, group_size, scale=scale).float()
    torch.testing.assert_close(process_advantages(x, group_size, scale=scale), expected, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------------------------
# zero_std_mask
# ------------------------------------------------------------------------------------------------------------


def test_zero_std_mask_outcome_hand_examples():
    rewards = torch.tensor(
        [
            [1.0, 1.0, 1.0],  # all equal -> True
            [0.0, 1.0, 0.0],  # spread -> False
            [NAN, 2.0, 2.0],  # finite ones equal -> True
            [NAN, NAN, 5.0],  # a single finite reward -> True
            [NAN, NAN, NAN],  # none -> True
            [NAN, 1.0, 2.0],  # spread among the finite -> False
        ]
    ).view(-1)
    expected = torch.tensor([True, False, True, True, True, False])
    assert torch.equal(zero_std_mask(rewards, 3), expected)


def test_zero_std_mask_process_hand_examples():
    step_rewards = torch.tensor(
        [
            [1.0, NAN, 1.0],  # group 0: every step of both outputs is 1 -> True
            [NAN, 1.0, NAN],
            [1.0, NAN, NAN],  # group 1: steps {1, 0} -> False
            [NAN, NAN, 0.0],
            [NAN, NAN, 0.5],  # group 2: one step in total -> True
            [NAN, NAN, NAN],
            [NAN, NAN, NAN],  # group 3: no step -> True
            [NAN, NAN, NAN],
        ]
    )
    assert torch.equal(zero_std_mask(step_rewards, 2), torch.tensor([True, False, True, True]))
    assert torch.equal(zero_std_mask(torch.zeros(4, 0), 2), torch.tensor([True, True]))
    assert zero_std_mask(torch.zeros(0), 2).shape == (0,)


# ------------------------------------------------------------------------------------------------------------
# Validation
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda x, g: outcome_advantages(x, g),
        lambda x, g: zero_std_mask(x, g),
        lambda x, g: get_gradient_coefficient("online_rft")(rewards=x, group_size=g),
    ],
)
def test_group_validation(call):
    with pytest.raises(ValueError, match=r"N=5.*group_size=2"):
        call(torch.zeros(5), 2)
    for bad in (0, -1, 2.0, True, None):
        with pytest.raises(ValueError, match="group_size"):
            call(torch.zeros(4), bad)
    with pytest.raises(ValueError, match="inf"):
        call(torch.tensor([0.0, float("inf")]), 2)


def test_process_validation():
    with pytest.raises(ValueError, match=r"N=3.*group_size=2"):
        process_advantages(torch.zeros(3, 4), 2)
    with pytest.raises(ValueError, match=r"shape \(N, T\)"):
        process_advantages(torch.zeros(4), 2)
    with pytest.raises(ValueError, match="float"):
        process_advantages(torch.zeros(4, 3, dtype=torch.long), 2)
    with pytest.raises(ValueError, match="inf"):
        process_advantages(torch.tensor([[0.0, -float("inf")], [NAN, 1.0]]), 2)
    with pytest.raises(ValueError, match=r"shape \(N,\)"):
        outcome_advantages(torch.zeros(4, 3), 2)


# ------------------------------------------------------------------------------------------------------------
# cap_to_right_samples: the ordering guarantee applied after process_advantages
# ------------------------------------------------------------------------------------------------------------


def test_cap_hand_example_of_the_docstring():
    """Right sample [0.9, 0.9, 0.4, 0.4] (4 tokens), cut-off sample [1.2, 0.5, -0.7, pad] (3 tokens): floor 0.4, cap
    min(0.4, 0) = 0, so [0, 0, -0.7] and its padding untouched; the right sample unchanged."""
    a = torch.tensor([[0.9, 0.9, 0.4, 0.4], [1.2, 0.5, -0.7, 0.3]])
    out = cap_to_right_samples(a, torch.tensor([True, False]), torch.tensor([4, 3]), group_size=2)
    torch.testing.assert_close(out, torch.tensor([[0.9, 0.9, 0.4, 0.4], [0.0, 0.0, -0.7, 0.3]]))


def test_cap_hand_example_process_advantages_of_a_short_right_sample_among_wrong_ones():
    """DeepSeekMath 4.1.3 on a group of 4, then the cap, by hand.

    Step rewards (token index: reward): the right sample "#### 42" + its outcome: {1: 1, 2: 1} (3 tokens); a sample
    with two right steps that the cap cut off (outcome 0): {1: 1, 3: 1, 5: 0} (6 tokens); two wrong samples, a wrong
    step and outcome 0: {1: 0, 2: 0} (3 tokens) each.
    Steps {1 x 4, 0 x 5}: mean 4/9, Bessel var (4 * 25/81 + 5 * 16/81) / 8 = 5/18, std s = sqrt(5/18);
    p = (5/9) / (s + eps) for a 1, q = -(4/9) / (s + eps) for a 0.
    DeepSeekMath: right [2p, 2p, p]; cut-off [2p + q, 2p + q, p + q, p + q, q, q]; wrong [2q, 2q, q]. The cut-off
    sample's first tokens (2p + q = 6/9 / s) outrank every token of the right one (lowest p = 5/9 / s). The cap
    (floor p > 0, so cap 0): cut-off [0, 0, 0, 0, q, q] (p + q = 1/9 / s > 0 capped too); the wrong ones stay."""
    x = torch.full((4, 6), NAN)
    x[0, 1], x[0, 2] = 1.0, 1.0
    x[1, 1], x[1, 3], x[1, 5] = 1.0, 1.0, 0.0
    x[2, 1], x[2, 2] = 0.0, 0.0
    x[3, 1], x[3, 2] = 0.0, 0.0
    s = math.sqrt(5 / 18) + 1e-4
    p, q = (5 / 9) / s, -(4 / 9) / s
    plain = process_advantages(x, group_size=4)
    expected_plain = torch.tensor(
        [
            [2 * p, 2 * p, p, 0.0, 0.0, 0.0],
            [2 * p + q, 2 * p + q, p + q, p + q, q, q],
            [2 * q, 2 * q, q, 0.0, 0.0, 0.0],
            [2 * q, 2 * q, q, 0.0, 0.0, 0.0],
        ]
    )
    torch.testing.assert_close(plain, expected_plain)
    assert plain[1].max() > plain[0, :3].min()  # the disorder the cap is for
    right = torch.tensor([True, False, False, False])
    out = cap_to_right_samples(plain, right, torch.tensor([3, 6, 3, 3]), group_size=4)
    expected = expected_plain.clone()
    expected[1] = torch.tensor([0.0, 0.0, 0.0, 0.0, q, q])
    torch.testing.assert_close(out, expected)


def test_cap_a_long_unfinished_sample_cannot_sum_past_a_short_right_one():
    """Why the cap is min(floor, 0) and not the floor alone: 10 tokens at 0.5 (below the right sample's lowest, 0.6)
    would sum to 5.0 against the right sample's 1.8 over 3 tokens."""
    a = torch.zeros(2, 10)
    a[0, :3] = torch.tensor([0.6, 0.6, 0.6])
    a[1] = 0.5
    out = cap_to_right_samples(a, torch.tensor([True, False]), torch.tensor([3, 10]), group_size=2)
    assert out[1].max() <= 0 and out[1].sum() <= out[0, :3].sum()


def test_cap_leaves_groups_without_a_right_sample_and_right_samples_alone():
    a = torch.tensor([[0.5, -0.2], [0.9, 0.1], [-0.3, 0.4], [0.7, 0.0]])
    right = torch.tensor([False, False, True, True])  # group 0: none right; group 1: both right
    out = cap_to_right_samples(a, right, torch.tensor([2, 2, 2, 2]), group_size=2)
    assert torch.equal(out, a)
    # a right sample without tokens sets no floor: nothing to compare with
    out = cap_to_right_samples(a[:2], torch.tensor([True, False]), torch.tensor([0, 2]), group_size=2)
    assert torch.equal(out, a[:2])


def test_cap_a_right_sample_with_a_wrong_step_sets_a_negative_floor():
    """A right sample can carry negative advantages (a false step early, in a mostly right group): the others are
    capped at its lowest, below 0."""
    a = torch.tensor([[-0.4, 0.2, 0.2], [0.1, -0.1, -0.5]])
    out = cap_to_right_samples(a, torch.tensor([True, False]), torch.tensor([3, 3]), group_size=2)
    torch.testing.assert_close(out, torch.tensor([[-0.4, 0.2, 0.2], [-0.4, -0.4, -0.5]]))


def test_cap_shapes_dtypes_devices_and_validation():
    a = torch.randn(4, 5, dtype=torch.float64)
    out = cap_to_right_samples(a, torch.tensor([1, 0, 0, 1]), torch.tensor([5, 5, 2, 0]), group_size=2)
    assert out.dtype == torch.float64 and out.device == a.device
    assert cap_to_right_samples(torch.zeros(0, 3), torch.zeros(0, dtype=torch.bool), torch.zeros(0), 2).shape == (0, 3)
    assert cap_to_right_samples(torch.zeros(2, 0), torch.ones(2, dtype=torch.bool), torch.zeros(2), 2).shape == (2, 0)
    with pytest.raises(ValueError, match="not divisible by group_size=3"):
        cap_to_right_samples(torch.zeros(4, 2), torch.zeros(4, dtype=torch.bool), torch.zeros(4), 3)


@pytest.mark.parametrize("seed", range(20))
def test_cap_guarantee_on_random_process_groups(seed):
    """Random step rewards through DeepSeekMath, random right samples and lengths: after the cap, in every group with
    a right sample holding a token, every other sample's tokens are <= the right samples' lowest and <= 0; nothing
    else moves; nothing rises."""
    generator = torch.Generator().manual_seed(seed)
    n, t, group = 12, 9, 4
    plain = process_advantages(random_step_rewards(generator, n, t, 4), group)
    right = torch.rand(n, generator=generator) < 0.3
    lengths = torch.randint(0, t + 1, (n,), generator=generator)
    out = cap_to_right_samples(plain, right, lengths, group)
    assert (out <= plain).all()
    real = torch.arange(t) < lengths.unsqueeze(1)
    for g in range(n // group):
        rows = range(g * group, (g + 1) * group)
        right_tokens = torch.cat([plain[i, real[i]] for i in rows if right[i]] or [torch.zeros(0)])
        for i in rows:
            if right[i] or right_tokens.numel() == 0:
                assert torch.equal(out[i], plain[i])
            else:
                assert (out[i, real[i]] <= min(right_tokens.min().item(), 0.0)).all()
                assert torch.equal(out[i, ~real[i]], plain[i, ~real[i]])
