"""GRPOExtTrainer against TRL's GRPOTrainer and against hand-derived expectations (CPU, embedded model)."""

import json
import math

import pytest
import torch

from grpo_ext.advantages import cap_to_right_samples, process_advantages
from grpo_ext.kl_control import AdaptiveKLController
from grpo_ext.methods.cost import CountingReward, SampleBudget
from grpo_ext.reasoning_steps import step_end_token_indices
from grpo_ext.tasks.arithmetic import Problem
from grpo_ext.tasks.base import TRUNCATED
from tests.trainer_utils import TASK, GRPOConfig, GRPOExtTrainer, GRPOTrainer, tiny_args, tiny_trainer


def even_answers_constant(prompts, completions, answer, **kwargs):
    """Zero-std by construction for prompts with an even answer; alternating 0/1 (signal) otherwise."""
    return [0.5 if int(a) % 2 == 0 else float(i % 2) for i, a in enumerate(answer)]


def group_batch(trainer, answer_parities, group=4):
    """A generation batch laid out like TRL's RepeatSampler: each chosen prompt repeated `group` times."""
    rows, used = [], set()
    for parity in answer_parities:
        i = next(i for i, r in enumerate(trainer.train_dataset) if int(r["answer"]) % 2 == parity and i not in used)
        used.add(i)
        rows += [trainer.train_dataset[i]] * group
    return rows


def final_weights(trainer):
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters()}


@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_extensions_off_match_trl_exactly(tmp_path, beta):
    runs = {}
    for name, trainer_cls, config_cls in [("trl", GRPOTrainer, GRPOConfig), ("ext", GRPOExtTrainer, None)]:
        args = tiny_args(
            tmp_path=tmp_path / name, max_steps=3, beta=beta, **({"cls": config_cls} if config_cls else {})
        )
        trainer = tiny_trainer(trainer_cls, args=args)
        trainer.train()
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        runs[name] = (losses, final_weights(trainer))
    assert len(runs["trl"][0]) == 3
    assert runs["trl"][0] == runs["ext"][0]
    for name, weight in runs["trl"][1].items():
        assert torch.equal(weight, runs["ext"][1][name]), name


LOSS_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"]


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_skip_equals_loss_on_batch_without_zero_std_groups(tmp_path, loss_type):
    args = tiny_args(tmp_path=tmp_path, zero_std_groups="skip", loss_type=loss_type, beta=0.1)
    trainer = tiny_trainer(args=args, reward_funcs=[even_answers_constant])
    trainer.model.train()
    torch.manual_seed(1)
    out = trainer._generate_and_score_completions(group_batch(trainer, [0, 1]))  # group 0 has no signal
    keep = out["zero_std_keep"].bool()
    assert keep.tolist() == [False] * 4 + [True] * 4
    assert out["completion_mask"][:4].sum() == 0

    reduced = {k: (v[keep] if isinstance(v, torch.Tensor) and v.ndim > 0 else v) for k, v in out.items()}
    del reduced["zero_std_keep"]
    reduced["num_items_in_batch"] = reduced["completion_mask"].sum()
    assert out["num_items_in_batch"] == reduced["num_items_in_batch"]

    torch.manual_seed(2)
    masked_loss = trainer._compute_loss(trainer.model, out)
    torch.manual_seed(2)
    reference = GRPOTrainer._compute_loss(trainer, trainer.model, reduced)  # TRL's loss on the smaller batch
    assert torch.isfinite(masked_loss)
    torch.testing.assert_close(masked_loss, reference, rtol=1e-5, atol=1e-7)


def test_refill_fills_the_batch_with_groups_that_have_signal(tmp_path):
    args = tiny_args(tmp_path=tmp_path, zero_std_groups="refill", max_refill_rounds=6)
    trainer = tiny_trainer(args=args, reward_funcs=[even_answers_constant])
    trainer.model.train()
    torch.manual_seed(0)
    out = trainer._generate_and_score_completions(group_batch(trainer, [0, 0]))  # both groups lack signal
    assert out["zero_std_keep"].bool().all()
    assert out["completion_mask"].sum(dim=1).gt(0).all()
    prompts = trainer.processing_class.batch_decode(out["prompt_ids"], skip_special_tokens=True)
    for g in range(2):  # every group is one fresh prompt with an odd answer (even ones cannot have signal)
        group_prompts = set(prompts[4 * g : 4 * g + 4])
        assert len(group_prompts) == 1
        assert Problem.from_prompt(group_prompts.pop()).answer % 2 == 1
    rounds = trainer._metrics["train"]["zero_std/refill_rounds"]
    assert rounds and 1 <= rounds[-1] <= 6
    assert trainer._metrics["train"]["zero_std/groups_skipped"][-1] == 0
    assert trainer._metrics["train"]["zero_std/frac_groups"][-1] == 1.0


def test_refill_rounds_stay_within_a_sample_budget(tmp_path):
    """A run at a sample budget (`grpo_ext.methods`' runner wires it so) reads what is left before each refill round:
    a round that would pass the budget is not drawn, and the groups still without signal are skipped."""
    args = tiny_args(tmp_path=tmp_path, zero_std_groups="refill", max_refill_rounds=3)
    counter = CountingReward(lambda completions, **kw: [1.0] * len(completions))  # no group ever has signal
    trainer = tiny_trainer(args=args, reward_funcs=[counter.fn])
    trainer.model.train()
    per_round = args.generation_batch_size  # 8: the batch below is one round's worth
    limit = SampleBudget(counter, budget=2 * per_round + per_round // 2, per_step=per_round)
    trainer.refill_allowance = limit.allowance
    out = trainer._generate_and_score_completions(group_batch(trainer, [0, 1]))
    # the batch and one refill fit (16 of 20); a second refill would reach 24
    assert trainer._metrics["train"]["zero_std/refill_rounds"][-1] == 1 and counter.samples == 2 * per_round
    assert not out["zero_std_keep"].bool().any() and limit.allowance() == per_round // 2
    trainer.refill_allowance = None  # no budget: max_refill_rounds alone bounds them
    trainer._generate_and_score_completions(group_batch(trainer, [0, 1]))
    assert trainer._metrics["train"]["zero_std/refill_rounds"][-1] == 3


def test_refill_gives_up_after_max_rounds_and_skips_the_rest(tmp_path):
    args = tiny_args(tmp_path=tmp_path, zero_std_groups="refill", max_refill_rounds=2)
    trainer = tiny_trainer(args=args, reward_funcs=[lambda completions, **kw: [1.0] * len(completions)])
    trainer.model.train()
    out = trainer._generate_and_score_completions(group_batch(trainer, [0, 1]))
    assert not out["zero_std_keep"].bool().any()
    assert out["num_items_in_batch"] == 0
    assert trainer._metrics["train"]["zero_std/refill_rounds"][-1] == 2
    assert trainer._metrics["train"]["zero_std/groups_skipped"][-1] == 2
    loss = trainer._compute_loss(trainer.model, out)
    assert torch.isfinite(loss) and loss.item() == 0.0


def test_process_advantages_are_wired_to_the_step_verifier(tmp_path):
    args = tiny_args(tmp_path=tmp_path, advantage_mode="process")
    trainer = tiny_trainer(args=args, process_reward_funcs=[TASK.step_reward])
    trainer.model.train()
    torch.manual_seed(0)
    data = trainer.train_dataset
    for first in range(0, 16, 2):  # the first pair of prompts whose groups have step-level signal for this base
        batch = [data[i] for i in (first, first + 1) for _ in range(4)]
        out = trainer._generate_and_score_completions(batch)
        if out["advantages"].abs().sum() > 0:
            break
    tok = trainer.processing_class
    advantages = out["advantages"]
    assert advantages.shape == out["completion_ids"].shape

    # Rebuild the step rewards from the texts by hand and compare with the trainer's advantages.
    step_rewards = torch.full(advantages.shape, math.nan)
    for row, (ids, mask) in enumerate(zip(out["completion_ids"], out["completion_mask"], strict=False)):
        ids = ids[mask.bool()].tolist()
        text = tok.decode(ids, skip_special_tokens=True)
        scores = TASK.verify_steps(batch[row]["prompt"], text)
        ends = step_end_token_indices(tok, ids, ";")
        assert len(ends) == len(scores)
        for end, score in zip(ends, scores, strict=False):
            step_rewards[row, end] = score
    plain = process_advantages(step_rewards, group_size=4)
    # then no wrong or cut-off sample above a finished right one of its group (right: the outcome, not cut off)
    lengths = out["completion_mask"].sum(dim=1)
    right = torch.tensor(
        [
            TASK.is_correct(tok.decode(ids, skip_special_tokens=True), r["answer"])
            and not (int(n) == args.max_completion_length and ids[int(n) - 1] != tok.eos_token_id)
            for ids, n, r in zip(out["completion_ids"], lengths, batch, strict=True)
        ]
    )
    expected = cap_to_right_samples(plain, right, lengths, group_size=4)
    assert advantages.abs().sum() > 0  # the batch has step-level signal, so the comparison is not vacuous
    torch.testing.assert_close(advantages, expected)
    # Token 0 of each row carries the sum of that row's normalised step rewards (mean/std over the group).
    for g in range(2):
        values = step_rewards[4 * g : 4 * g + 4]
        present = values[~torch.isnan(values)]
        if present.numel() > 1 and present.std() > 0:
            own = values[0][~torch.isnan(values[0])]
            by_hand = ((own - present.mean()) / (present.std() + 1e-4)).sum()
            torch.testing.assert_close(advantages[4 * g, 0], by_hand, rtol=1e-5, atol=1e-5)


def test_rewards_are_told_the_cut_off_samples_and_process_advantages_keep_right_samples_first(tmp_path):
    """Issue 48's wiring: every reward function gets `completion_truncated` (max_completion_length tokens, no EOS), and
    the process advantages are DeepSeekMath's capped by `cap_to_right_samples` (right: outcome > 0, not cut off).

    Scripted rewards make the cap bite: sample 0 of each group is "right" (outcome 1) with steps scored 0, sample 3
    scores 1 on every step with outcome 0, so DeepSeekMath ranks sample 3's first tokens above sample 0."""
    told = []

    def outcome(prompts, completions, **kwargs):
        told.append(list(kwargs[TRUNCATED]))
        return [1.0 if i % 4 == 0 else 0.0 for i in range(len(completions))]

    def steps(prompts, completions, **kwargs):
        assert kwargs[TRUNCATED] == told[-1]  # the process reward functions are told too
        scores = [TASK.verify_steps(p, c) for p, c in zip(prompts, completions, strict=True)]
        return [[1.0 if i % 4 == 3 else 0.0] * len(s) for i, s in enumerate(scores)]

    args = tiny_args(
        tmp_path=tmp_path, advantage_mode="process", process_include_outcome=True, max_completion_length=14
    )
    trainer = tiny_trainer(args=args, reward_funcs=[outcome], process_reward_funcs=[steps])
    trainer.model.train()
    torch.manual_seed(0)
    batch = group_batch(trainer, [0, 1])
    out = trainer._generate_and_score_completions(batch)
    tok = trainer.processing_class
    lengths = out["completion_mask"].sum(dim=1)
    ids = [row[: int(n)].tolist() for row, n in zip(out["completion_ids"], lengths, strict=True)]
    cut = [len(i) == 14 and i[-1] != tok.eos_token_id for i in ids]
    assert told[-1] == cut and any(cut) and not all(cut)  # both kinds in the batch: the flags are not vacuous

    step_rewards = torch.full(out["advantages"].shape, math.nan)
    for row, row_ids in enumerate(ids):
        ends = step_end_token_indices(tok, row_ids, ";")
        for end in ends:
            step_rewards[row, end] = 1.0 if row % 4 == 3 else 0.0
        if row_ids:
            last = step_rewards[row, len(row_ids) - 1]
            step_rewards[row, len(row_ids) - 1] = (0.0 if math.isnan(last) else last) + float(row % 4 == 0)
    plain = process_advantages(step_rewards, group_size=4)
    right = torch.tensor([row % 4 == 0 and not c for row, c in enumerate(cut)])
    expected = cap_to_right_samples(plain, right, lengths, group_size=4)
    torch.testing.assert_close(out["advantages"], expected)
    assert not torch.equal(expected, plain)  # the cap changed something: the comparison is not DeepSeekMath's alone


def test_adaptive_beta_follows_the_ziegler_update_and_survives_a_checkpoint(tmp_path):
    args = tiny_args(
        tmp_path=tmp_path,
        max_steps=3,
        beta=0.1,
        kl_controller="adaptive",
        target_kl=1e-4,
        kl_horizon=16,
        save_strategy="steps",
        save_steps=3,
    )
    trainer = tiny_trainer(args=args)
    trainer.train()
    kls = [h["kl"] for h in trainer.state.log_history if "kl" in h]
    betas = [h["beta"] for h in trainer.state.log_history if "beta" in h]
    assert len(kls) == len(betas) == 3
    beta, expected = 0.1, []
    for kl in kls:  # by hand: e = clip(kl / target - 1, -0.2, 0.2); beta *= 1 + e * 8 / 16
        beta *= 1 + max(-0.2, min(0.2, kl / 1e-4 - 1)) * 8 / 16
        expected.append(beta)
    assert kls[0] == pytest.approx(0.0, abs=1e-7)  # policy == reference at the first step: beta shrinks
    assert betas == pytest.approx(expected, rel=1e-4)
    assert trainer.beta == pytest.approx(expected[-1])

    state = json.loads((tmp_path / "checkpoint-3" / "grpo_ext_state.json").read_text())
    fresh = tiny_trainer(
        args=tiny_args(tmp_path=tmp_path / "b", beta=0.1, kl_controller="adaptive", target_kl=1e-4, kl_horizon=16)
    )
    assert fresh.beta == 0.1
    fresh.create_optimizer_and_scheduler(num_training_steps=3)
    fresh._load_optimizer_and_scheduler(str(tmp_path / "checkpoint-3"))
    assert fresh.beta == pytest.approx(expected[-1])
    assert fresh.kl_control.state_dict() == state["kl_controller"]
    restored = AdaptiveKLController(0.5, 1.0, 1.0)
    restored.load_state_dict(state["kl_controller"])
    assert restored.beta == pytest.approx(expected[-1])


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"advantage_mode": "proces"}, "advantage_mode: unknown value 'proces'"),
        ({"zero_std_groups": "drop"}, "zero_std_groups: unknown value 'drop'"),
        ({"kl_controller": "pid"}, "kl_controller: unknown value 'pid'"),
        ({"kl_controller": "adaptive", "beta": 0.0}, "needs beta > 0"),
        ({"kl_controller": "adaptive", "beta": 0.1, "target_kl": 0.0}, r"target_kl: must be in \(0, inf\)"),
        ({"kl_controller": "adaptive", "beta": 0.1, "kl_horizon": 0}, r"kl_horizon: must be in \(0, inf\)"),
    ],
)
def test_bad_config_is_named(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny_args(tmp_path=tmp_path, **overrides)


def test_process_mode_without_a_source_and_wrong_step_counts(tmp_path):
    with pytest.raises(ValueError, match="process_reward_funcs or process_reward_model"):
        tiny_trainer(args=tiny_args(tmp_path=tmp_path, advantage_mode="process"))

    def one_score_too_many(prompts, completions, **kwargs):
        return [TASK.verify_steps(p, c) + [1.0] for p, c in zip(prompts, completions, strict=False)]

    trainer = tiny_trainer(
        args=tiny_args(tmp_path=tmp_path, advantage_mode="process"), process_reward_funcs=[one_score_too_many]
    )
    trainer.model.train()
    with pytest.raises(ValueError, match="'one_score_too_many' returned .* step scores for completion 0"):
        trainer._generate_and_score_completions(group_batch(trainer, [0, 1]))


def test_a_missing_outcome_never_erases_a_step_on_the_same_token():
    """Bug 5: a truncated completion (no EOS) has its last step end on its last token, where process_include_outcome
    puts the outcome; a NaN outcome (unscored) adds nothing instead of turning the step's score into NaN."""
    from grpo_ext.rewards.process import ScoredSteps, build_step_rewards

    steps = [ScoredSteps(ends=[2, 5], scores=[1.0, 0.0], length=6), ScoredSteps(ends=[1], scores=[1.0], length=4)]
    mask = torch.ones(2, 6)
    rewards = build_step_rewards(steps, mask, outcome=torch.tensor([math.nan, 0.5]))
    assert rewards[0, 2] == 1.0 and rewards[0, 5] == 0.0  # the step at the last token keeps its score
    assert rewards[1, 1] == 1.0 and rewards[1, 3] == 0.5  # a real outcome is one more step at the last token
    assert int(torch.isnan(rewards).logical_not().sum()) == 4
    nan_step = build_step_rewards([ScoredSteps(ends=[3, 3], scores=[math.nan, 2.0], length=4)], torch.ones(1, 4))
    assert nan_step[0, 3] == 2.0  # nor does an unscored step ending on the same token as a scored one


def test_online_rft_skip_keeps_groups_where_every_sample_is_correct(tmp_path):
    """Online RFT gives every correct sample a coefficient of 1, so an all-correct group has signal and stays; an
    all-wrong group (every coefficient 0) is the one skipped."""

    def by_parity(prompts, completions, answer, **kwargs):  # even answer: all correct; odd: all wrong
        return [1.0 if int(a) % 2 == 0 else 0.0 for a in answer]

    args = tiny_args(tmp_path=tmp_path, advantage_mode="online_rft", zero_std_groups="skip")
    trainer = tiny_trainer(args=args, reward_funcs=[by_parity])
    trainer.model.train()
    out = trainer._generate_and_score_completions(group_batch(trainer, [0, 1]))
    assert out["advantages"].tolist() == [1.0] * 4 + [0.0] * 4
    assert out["zero_std_keep"].tolist() == [1.0] * 4 + [0.0] * 4


def test_refill_draws_from_an_iterable_dataset_and_a_resume_draws_the_same(tmp_path):
    """An IterableDataset has no random access: refill reads it on (the same prompts after a resume)."""
    from grpo_ext.batching import RefillPrompts

    data = TASK.load("train", 64)
    stream = data.to_iterable_dataset()
    args = tiny_args(tmp_path=tmp_path, zero_std_groups="refill", max_refill_rounds=6, max_steps=1)
    trainer = tiny_trainer(args=args, reward_funcs=[even_answers_constant], train_dataset=stream)
    trainer.model.train()
    torch.manual_seed(0)
    even = [row for row in data if int(row["answer"]) % 2 == 0][:2]
    out = trainer._generate_and_score_completions([row for row in even for _ in range(4)])  # no signal: refilled
    assert out["zero_std_keep"].bool().all() and trainer._metrics["train"]["zero_std/refill_rounds"][-1] >= 1

    first = RefillPrompts(stream, seed=0)
    drawn = [first.next_prompts(3) for _ in range(30)]  # past the end of the 64 examples: an epoch starts again
    resumed = RefillPrompts(stream, seed=0)
    resumed.draws = 20
    assert resumed.next_prompts(3) == drawn[20]
    assert [row["prompt"] for row in drawn[0]] == [row["prompt"] for row in list(stream)[:3]]
