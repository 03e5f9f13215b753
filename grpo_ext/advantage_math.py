"""Advantages (gradient coefficients) for GRPO and its relatives, as pure tensor functions.

Modelled on verl's ``core_algos.py``: tensors in, tensors out, no trainer state. The trainer gathers rewards
from all processes (groups can span processes), calls one function here, and slices its own rows back.

Conventions shared by every function:

* ``N`` completions are laid out group by group: rows ``[k * group_size, (k + 1) * group_size)`` are the
  ``group_size`` samples of prompt ``k``, exactly as TRL orders them.
* NaN means *missing*: a reward function returned ``None`` (outcome), or no step ends at this token
  (process). Missing values never enter a statistic and always get advantage 0. ``+-inf`` is rejected with a
  ``ValueError``: it is a bug in a reward function, and any normalisation of it would produce NaN.
* Outputs are finite for every finite-or-NaN input (within float32 range: squared deviations must not
  overflow, so ``|reward| < ~1e18``).

The registry that names these functions for a config (``advantage_mode``) is :mod:`grpo_ext.advantages`, which is
also their public home: import them from there.
"""

from __future__ import annotations

import operator

import torch

__all__ = ["cap_to_right_samples", "correct_indicator", "outcome_advantages", "process_advantages", "zero_std_mask"]


# ------------------------------------------------------------------------------------------------------------
# Input validation
# ------------------------------------------------------------------------------------------------------------


def _check_group_size(group_size: int) -> int:
    # operator.index accepts int, numpy and 0-d integer tensors, but not floats or bools (True is an int).
    if isinstance(group_size, bool):
        raise ValueError(f"group_size must be a positive integer, got {group_size!r}")
    try:
        group_size = operator.index(group_size)
    except TypeError:
        raise ValueError(f"group_size must be a positive integer, got {group_size!r}") from None
    if group_size < 1:
        raise ValueError(f"group_size must be a positive integer, got {group_size}")
    return group_size


def _check_grouped(x: torch.Tensor, group_size: int, name: str, ndims: tuple[int, ...]) -> int:
    """Validate shape and grouping of ``x``; returns ``group_size`` as a plain int."""
    group_size = _check_group_size(group_size)
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.ndim not in ndims:
        shapes = " or ".join({1: "(N,)", 2: "(N, T)"}[d] for d in ndims)
        raise ValueError(f"{name} must have shape {shapes}, got shape {tuple(x.shape)}")
    if x.shape[0] % group_size != 0:
        raise ValueError(
            f"{name} has N={x.shape[0]} rows, which is not divisible by group_size={group_size}: "
            "rows must be whole groups of group_size samples per prompt"
        )
    return group_size


def _check_no_inf(x: torch.Tensor, name: str) -> None:
    if x.is_floating_point() and bool(torch.isinf(x).any()):
        raise ValueError(f"{name} contains +-inf; rewards must be finite, or NaN for a missing reward")


def _as_float(x: torch.Tensor) -> torch.Tensor:
    # float32 keeps TRL's arithmetic bit for bit (its rewards are float32); half precision is upcast because
    # group statistics in fp16/bf16 lose too much; float64 is kept as given.
    if x.dtype == torch.float64:
        return x
    return x.float()


def _has_signal(grouped: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
    """``(G, M)`` values and presence mask -> ``(G, 1)`` bool: at least two present values, not all equal.

    A group without signal must get advantage exactly 0. Centring does not guarantee it: the mean of equal
    float32 values is not always that value (``sum / count`` rounds), and the one-ulp residue divided by a
    std of the same size becomes an advantage of order 0.5 for rewards near 1000.
    """
    highest = torch.where(present, grouped, float("-inf")).amax(dim=1, keepdim=True)
    lowest = torch.where(present, grouped, float("inf")).amin(dim=1, keepdim=True)
    return (present.sum(dim=1, keepdim=True) >= 2) & (highest != lowest)


# ------------------------------------------------------------------------------------------------------------
# Outcome supervision
# ------------------------------------------------------------------------------------------------------------


def outcome_advantages(rewards: torch.Tensor, group_size: int, scale: bool = True, eps: float = 1e-4) -> torch.Tensor:
    """GRPO outcome-supervision advantages (DeepSeekMath 4.1.2): ``(r - group mean) / (group std + eps)``.

    Args:
        rewards: ``(N,)`` one scalar reward per completion; NaN = missing (every reward function returned
            ``None``).
        group_size: samples per prompt; ``N`` must be a multiple of it.
        scale: divide by ``group std + eps`` (TRL's ``scale_rewards="group"``); ``False`` only centres
            (``scale_rewards="none"``, Dr. GRPO).
        eps: added to the std, TRL's hard-coded ``1e-4``.

    Returns:
        ``(N,)`` advantages, float32 (float64 if ``rewards`` is float64). Mean and std are taken over the
        finite rewards of each group; std is Bessel-corrected. A NaN reward gets 0; a group with fewer than
        two finite rewards, or whose finite rewards are all equal (``zero_std_groups``), gets exactly 0.

    The arithmetic is TRL 1.16's (``GRPOTrainer._generate_and_score_completions``, ``scale_rewards="group"``,
    ``torch.nanmean`` then ``trl.trainer.utils.nanstd``) op for op, so without NaN the result is bit-identical
    to what TRL puts in ``inputs["advantages"]``, with one deliberate exception: for an all-equal group TRL
    can return rounding noise (up to ~0.5 for equal rewards near 1000, see ``_has_signal``); here it is 0.
    On 0/1 rewards both are exactly 0.
    """
    group_size = _check_grouped(rewards, group_size, "rewards", ndims=(1,))
    _check_no_inf(rewards, "rewards")
    rewards = _as_float(rewards)
    grouped = rewards.reshape(-1, group_size)  # (G, group_size)

    present = ~torch.isnan(grouped)
    count = present.sum(dim=1, keepdim=True)  # (G, 1) finite rewards per group
    mean = torch.nanmean(grouped, dim=1, keepdim=True)  # (G, 1)
    advantages = grouped - mean
    if scale:
        # trl.trainer.utils.nanstd, inlined: nan-aware population variance times the Bessel factor n/(n-1).
        # `count / (count - 1)` is an int/int true division (default float dtype) exactly as in TRL; groups
        # with count < 2 get inf/NaN here and are zeroed below.
        variance = torch.nanmean(advantages**2, dim=1, keepdim=True)
        variance = variance * (count / (count - 1))
        advantages = advantages / (torch.sqrt(variance) + eps)

    # Where TRL relies on nan_to_num, be explicit: missing rewards and groups without signal give 0.
    keep = present & _has_signal(grouped, present)
    return torch.where(keep, advantages, torch.zeros_like(advantages)).reshape(-1)


# ------------------------------------------------------------------------------------------------------------
# Process supervision
# ------------------------------------------------------------------------------------------------------------


def process_advantages(
    step_rewards: torch.Tensor, group_size: int, eps: float = 1e-4, *, scale: bool = True
) -> torch.Tensor:
    """GRPO process-supervision advantages (DeepSeekMath 4.1.3), one per token.

    Args:
        step_rewards: ``(N, T)``, NaN everywhere except at the token index where a reasoning step ends,
            which holds that step's reward. Any float dtype.
        group_size: samples per prompt; ``N`` must be a multiple of it.
        eps: added to the std.
        scale: divide by ``std + eps`` (the paper's normalisation); ``False`` only centres, the process
            analogue of TRL's ``scale_rewards="none"``.

    Returns:
        ``(N, T)`` float32 advantages (accumulated in float32 whatever the input dtype):

        * every step reward of a group is normalised with the mean and Bessel-corrected std over *all* steps
          of *all* outputs of that group: ``r~ = (r - mean) / (std + eps)``;
        * ``A[i, t] = sum of r~ over output i's steps whose end index is >= t`` (reverse cumulative sum), so a
          token is credited with every step from its own onwards;
        * tokens after an output's last step end, outputs without steps, and groups with fewer than two steps
          in total or with all step rewards equal (``zero_std_groups``) get exactly 0.

    Cost: a batch holds few steps per token (~16 per 1000), so the arithmetic runs on a compact
    ``(N, K + 1)`` matrix of steps (``K`` = most steps in one output); ``(N, T)``-sized work is limited to
    finding the steps and expanding step values back over tokens (a dense masked implementation needs a
    dozen full passes and is ~4x slower). No Python loop over rows or groups; ~20-30 ms for N=4096, T=1024,
    16 steps a row on one CPU thread.
    """
    group_size = _check_grouped(step_rewards, group_size, "step_rewards", ndims=(2,))
    if not step_rewards.is_floating_point():
        raise ValueError(f"step_rewards must be a float tensor (NaN marks 'no step'), got {step_rewards.dtype}")
    n, t = step_rewards.shape
    device = step_rewards.device
    out_dtype = torch.float32

    # 1. Compact: the steps of row i, left-aligned, in (N, K + 1) matrices (K = most steps in one row; the
    #    extra, always-empty column is the segment of tokens after a row's last step). nonzero() is row-major,
    #    so within a row steps come out in token order and `rank` is each step's ordinal in its row.
    #    `x == x` is `~isnan(x)` in one pass instead of two (NaN is the only value unequal to itself).
    rows, ends = torch.nonzero(step_rewards == step_rewards, as_tuple=True)  # (S,), (S,)
    num_steps = rows.numel()
    if num_steps == 0:
        return torch.zeros(n, t, dtype=out_dtype, device=device)
    values = step_rewards[rows, ends].to(out_dtype)  # (S,)
    if not bool(torch.isfinite(values).all()):
        raise ValueError("step_rewards contains +-inf; step rewards must be finite, or NaN where no step ends")
    steps_per_row = torch.bincount(rows, minlength=n)  # (N,)
    first_of_row = torch.cumsum(steps_per_row, 0) - steps_per_row  # (N,) index in the S-vector
    rank = torch.arange(num_steps, device=device) - first_of_row[rows]  # (S,)
    width = int(steps_per_row.max()) + 1  # K + 1
    step_values = torch.zeros(n, width, dtype=out_dtype, device=device)
    step_values[rows, rank] = values
    has_step = torch.zeros(n, width, dtype=torch.bool, device=device)
    has_step[rows, rank] = True

    # 2. Normalise over every step of every output of a group (two-pass mean/variance: no cancellation).
    grouped = step_values.view(n // group_size, -1)  # (G, group_size * (K + 1))
    grouped_mask = has_step.view_as(grouped)
    count = grouped_mask.sum(dim=1, keepdim=True)  # (G, 1) steps per group
    mean = grouped.sum(dim=1, keepdim=True) / count.clamp(min=1)
    centred = torch.where(grouped_mask, grouped - mean, 0.0)
    if scale:
        std = torch.sqrt(centred.square().sum(dim=1, keepdim=True) / (count - 1).clamp(min=1))
        centred = centred / (std + eps)
    # Fewer than two steps, or all equal: no signal, exactly 0 (not rounding noise over std + eps).
    normalised = torch.where(_has_signal(grouped, grouped_mask), centred, 0.0).view(n, width)

    # 3. Reverse cumulative sum over each row's steps: suffix[i, j] = sum of normalised[i, j:].
    #    Padding columns are 0, so suffix is 0 from each row's last step on.
    suffix = normalised.flip(1).cumsum(1).flip(1)  # (N, K + 1)

    # 4. Expand back to tokens. Step j of a row covers the tokens (end of step j-1, end of step j]; the first
    #    padding column covers (last end, T - 1] with value 0, and later padding columns cover nothing. Taken
    #    row-major, these segments tile the flattened (N, T) output in order.
    segment_end = torch.full((n, width), t - 1, dtype=torch.long, device=device)
    segment_end[rows, rank] = ends
    segment_len = torch.diff(segment_end, dim=1, prepend=segment_end.new_full((n, 1), -1))  # (N, K + 1)
    # Segment ordinal of every token, then one gather. int32 indices halve the memory traffic of the gather
    # (the (N, T) index is the biggest tensor here); a segment index is < N * (K + 1).
    index_dtype = torch.int32 if n * width < 2**31 else torch.long
    token_segment = torch.repeat_interleave(segment_len.reshape(-1).to(index_dtype), output_size=n * t)
    advantages = suffix.reshape(-1).index_select(0, token_segment)
    return advantages.view(n, t)


# ------------------------------------------------------------------------------------------------------------
# Groups without signal
# ------------------------------------------------------------------------------------------------------------


def zero_std_mask(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Groups that carry no learning signal: every advantage in them is (about) 0.

    Args:
        rewards: ``(N,)`` outcome rewards or ``(N, T)`` process step rewards; NaN = missing / no step.
        group_size: samples per prompt; ``N`` must be a multiple of it.

    Returns:
        ``(N // group_size,)`` bool: True where all finite rewards of the group (all steps of all outputs, for
        ``(N, T)``) are exactly equal, or where the group has fewer than two finite values. Exact equality,
        not TRL's ``isclose(std, 0)`` used for its ``frac_reward_zero_std`` log: the two agree on verifier
        rewards, and exact equality is the only rule that makes "advantage 0" a guarantee.
    """
    group_size = _check_grouped(rewards, group_size, "rewards", ndims=(1, 2))
    _check_no_inf(rewards, "rewards")
    if not rewards.is_floating_point():
        rewards = rewards.double()  # exact for ints up to 2**53; only equality is tested
    num_groups = rewards.shape[0] // group_size
    per_group = group_size * (rewards.shape[1] if rewards.ndim == 2 else 1)
    grouped = rewards.reshape(num_groups, per_group)  # (G, group_size) or (G, group_size * T)
    if per_group == 0:  # T == 0: no values at all
        return torch.ones(num_groups, dtype=torch.bool, device=rewards.device)
    return ~_has_signal(grouped, ~torch.isnan(grouped)).squeeze(1)


def correct_indicator(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """1 for a correct sample (reward ``> 0``), else 0: online RFT's gradient coefficient. A missing (NaN) reward
    counts as incorrect; no group statistics. Returns ``(N,)`` float32 (float64 for float64 rewards)."""
    _check_grouped(rewards, group_size, "rewards", ndims=(1,))
    _check_no_inf(rewards, "rewards")
    rewards = _as_float(rewards)
    return (rewards > 0).to(rewards.dtype)  # NaN > 0 is False


# ------------------------------------------------------------------------------------------------------------
# An ordering guarantee for per-token advantages (applied after process_advantages)
# ------------------------------------------------------------------------------------------------------------


def cap_to_right_samples(
    advantages: torch.Tensor, right: torch.Tensor, lengths: torch.Tensor, group_size: int
) -> torch.Tensor:
    """In a group holding a right sample, no other sample gets more advantage than it on any token.

    Args:
        advantages: ``(N, T)`` per-token advantages (e.g. :func:`process_advantages`).
        right: ``(N,)`` bool, a *finished right* sample: right answer and ended on its own (not cut off at the
            length cap).
        lengths: ``(N,)`` real tokens of each sample (``advantages[i, lengths[i]:]`` is padding).
        group_size: samples per prompt; ``N`` must be a multiple of it.

    Returns:
        ``(N, T)``, same dtype and device. In a group with at least one right sample that has a token, let ``floor`` be
        the lowest advantage of any real token of the group's right samples; every real token of every other sample
        (wrong, or cut off) is capped at ``min(floor, 0)``: ``A'[i, t] = min(A[i, t], floor, 0)``. Right samples,
        padding, and groups without a right sample are left as they are. The cap only lowers values.

    Guarantees, per group holding a right sample: (1) ``max_t A'[i, t] <= min_t A[r, t]`` for every non-right ``i``
    and right ``r`` (over real tokens); (2) no non-right sample has a positive advantage on any token, so the summed
    advantage of a non-right sample (what the token-summed loss weighs it by) is ``<= 0``, and at most that of a right
    sample whose tokens are all ``>= 0`` (the usual case: every step of a right sample right). The per-token cap of
    (1) alone would not give (2): DeepSeekMath's sum of later steps' rewards leaves a long unfinished sample with small
    positive advantages on many tokens, which add up past a short right sample's.

    Why: DeepSeekMath 4.1.3 credits a token with the normalised rewards of every later step, so a sample with more
    right-looking steps than a right sample outranks it on its early tokens, even when it never finishes (a right
    line, then the length cap). Outside groups with a right answer, process supervision is untouched: there its
    credit for the right early steps of wrong samples is the signal.

    Hand example (group of 2, T = 4): right sample ``[0.9, 0.9, 0.4, 0.4]`` with 4 tokens, cut-off sample
    ``[1.2, 0.5, -0.7, 0.0]`` with 3 tokens: floor 0.4, cap 0 -> ``[0.0, 0.0, -0.7, 0.0]``.
    """
    group_size = _check_grouped(advantages, group_size, "advantages", ndims=(2,))
    n, t = advantages.shape
    if n == 0 or t == 0:
        return advantages.clone()
    device = advantages.device
    right = right.to(device=device, dtype=torch.bool).reshape(n)
    real = torch.arange(t, device=device).unsqueeze(0) < lengths.to(device).reshape(n, 1)  # (N, T)
    inf = torch.tensor(float("inf"), dtype=advantages.dtype, device=device)
    floor = torch.where(real & right.unsqueeze(1), advantages, inf).view(n // group_size, -1).amin(dim=1)  # (G,)
    # a group without a right token keeps an infinite cap: nothing there is touched
    cap = torch.where(torch.isinf(floor), floor, floor.clamp(max=0.0)).repeat_interleave(group_size)  # (N,)
    capped = torch.minimum(advantages, cap.unsqueeze(1))
    return torch.where(real & ~right.unsqueeze(1), capped, advantages)
