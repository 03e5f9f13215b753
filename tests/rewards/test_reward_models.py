"""Learned reward models (issue 7, part 1): built from the policy's weights, trained on verifier labels
(grpo_ext.experiments.iterative.rm_training), used as TRL reward functions (grpo_ext.rewards.orm) and through
ProcessRewardModel (grpo_ext.rewards.prm, TRL's PRM format)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from grpo_ext.char_tokenizer import build_char_tokenizer
from grpo_ext.experiments.iterative.rm_training import (
    IGNORE_INDEX,
    encode_process,
    evaluate_reward_model,
    init_reward_model,
    load_reward_model,
    train_reward_model,
)
from grpo_ext.rewards.orm import RMRewardFunction, score_outcome
from grpo_ext.rewards.prm import PRMOutcomeReward, ProcessRewardModel


def make_tiny_policy(path, seed: int = 0, hidden: int = 32, layers: int = 2):
    """A random 2-layer Llama with the embedded model's char tokenizer, saved to `path` (what tests train on)."""
    torch.manual_seed(seed)
    tokenizer = build_char_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    return make_tiny_policy(tmp_path_factory.mktemp("policy"))


def separable_records(n: int = 64) -> list[dict]:
    """Right answers end with `#1`, wrong ones with `#2`: a one-token rule an RM can learn in a few steps."""
    records = []
    for i in range(n):
        a, b = i % 10, (i * 7) % 10
        right = i % 2 == 0
        completion = f"{a}+{b}={a + b};#{1 if right else 2}"
        records.append(
            {
                "id": f"r{i}",
                "prompt": f"{a}+{b}=",
                "completion": completion,
                "label": int(right),
                "step_labels": [1.0, float(right)],
            }
        )
    return records


@pytest.mark.parametrize("reward_model_type", ["outcome", "process"])
def test_reward_model_body_is_the_policys(policy_dir, reward_model_type):
    policy = AutoModelForCausalLM.from_pretrained(policy_dir)
    rm, tokenizer = init_reward_model(reward_model_type, policy_dir)
    policy_body = dict(policy.model.named_parameters())
    rm_body = dict(rm.model.named_parameters())
    assert policy_body.keys() == rm_body.keys()
    assert all(torch.equal(policy_body[k], rm_body[k]) for k in policy_body)
    assert rm.config.num_labels == (1 if reward_model_type == "outcome" else 2)
    assert tokenizer.pad_token_id is not None


@pytest.mark.parametrize("init", ["policy", "scratch"])
def test_reward_model_init_depends_on_its_seed_only(policy_dir, init):
    """The new head is drawn from the seed, not from whatever state torch's global generator is in (torch seeds it
    from the OS in every process: unseeded, two identical iterative runs trained different PRMs)."""
    torch.manual_seed(1)
    first, _ = init_reward_model("process", policy_dir, init, seed=0)
    torch.manual_seed(2)
    state = torch.random.get_rng_state()
    second, _ = init_reward_model("process", policy_dir, init, seed=0)
    assert torch.equal(torch.random.get_rng_state(), state)  # the caller's stream is left where it was
    other, _ = init_reward_model("process", policy_dir, init, seed=1)
    assert torch.equal(first.score.weight, second.score.weight)
    assert not torch.equal(first.score.weight, other.score.weight)


def test_process_labels_sit_at_step_ends_trl_prm_format():
    tokenizer = build_char_tokenizer()
    record = {"prompt": "12+3=", "completion": "12+3=15;#15", "step_labels": [1.0, 0.0]}
    item = encode_process(tokenizer, record, ";")
    text = record["prompt"] + record["completion"]
    assert len(item["input_ids"]) == len(text)
    labelled = {i: v for i, v in enumerate(item["labels"]) if v != IGNORE_INDEX}
    assert labelled == {text.index(";"): 1, len(text) - 1: 0}  # the separator token, then the last token
    with pytest.raises(ValueError, match="1 step labels for 2 steps"):
        encode_process(tokenizer, {**record, "step_labels": [1.0]}, ";")
    # a step with nothing to check has no label: the PRM is not trained there
    unlabelled = encode_process(tokenizer, {**record, "step_labels": [None, 0.0]}, ";")
    assert {i: v for i, v in enumerate(unlabelled["labels"]) if v != IGNORE_INDEX} == {len(text) - 1: 0}


def test_outcome_rm_reward_function_scores_change_with_training(policy_dir, tmp_path):
    records = separable_records()
    rm, tokenizer = init_reward_model("outcome", policy_dir)
    prompts = [r["prompt"] for r in records]
    completions = [r["completion"] for r in records]
    labels = np.array([r["label"] for r in records])
    reward = RMRewardFunction(model=rm, tokenizer=tokenizer)
    before = np.array(
        reward(
            prompts=prompts,
            completions=completions,
            completion_ids=[[0]] * len(records),
            answer=["1"] * len(records),
            trainer_state=None,
        )
    )
    assert before.shape == (len(records),) and ((before >= 0) & (before <= 1)).all()

    train_reward_model(
        "outcome", rm, tokenizer, records, tmp_path / "orm", epochs=15, learning_rate=5e-3, batch_size=16
    )
    after = np.array(RMRewardFunction(tmp_path / "orm")(prompts=prompts, completions=completions))
    assert not np.allclose(before, after, atol=1e-3)
    assert after[labels == 1].min() > after[labels == 0].max()  # separable data: perfectly ranked after training
    metrics = evaluate_reward_model("outcome", *load_reward_model("outcome", tmp_path / "orm"), records)
    assert metrics["accuracy"] == 1.0 and metrics["auc"] == 1.0
    assert not (tmp_path / "orm.tmp").exists()  # written to a temporary folder, then renamed


def test_process_rm_trains_and_plugs_into_process_reward_model(policy_dir, tmp_path):
    records = separable_records()
    prm, tokenizer = init_reward_model("process", policy_dir)
    train_reward_model(
        "process",
        prm,
        tokenizer,
        records,
        tmp_path / "prm",
        separator=";",
        epochs=15,
        learning_rate=5e-3,
        batch_size=16,
    )
    scorer = ProcessRewardModel(str(tmp_path / "prm"), ";")  # the trainer's PRM wrapper (process_reward_model)
    steps = scorer(prompts=[r["prompt"] for r in records], completions=[r["completion"] for r in records])
    assert all(len(s) == 2 for s in steps)
    last = np.array([s[1] for s in steps])
    labels = np.array([r["label"] for r in records])
    assert last[labels == 1].min() > last[labels == 0].max()
    outcome = PRMOutcomeReward(scorer)(prompts=[records[0]["prompt"]], completions=[records[0]["completion"]])
    assert outcome == [pytest.approx(min(steps[0]))]
    metrics = evaluate_reward_model("process", *load_reward_model("process", tmp_path / "prm"), records, ";")
    assert metrics["accuracy"] == 1.0 and metrics["n"] == 2 * len(records)


def test_single_class_labels_give_no_auc(policy_dir):
    rm, tokenizer = init_reward_model("outcome", policy_dir)
    records = [{**r, "label": 0} for r in separable_records(8)]
    metrics = evaluate_reward_model("outcome", rm, tokenizer, records)
    assert metrics["auc"] is None and metrics["n"] == 8 and 0 <= metrics["accuracy"] <= 1


def test_bad_reward_model_input(policy_dir, tmp_path):
    with pytest.raises(ValueError, match="reward_model_type: unknown value 'pairwise'"):
        init_reward_model("pairwise", policy_dir)
    with pytest.raises(FileNotFoundError, match="no model folder"):
        init_reward_model("outcome", tmp_path / "missing")
    prm, tokenizer = init_reward_model("process", policy_dir)
    with pytest.raises(ValueError, match="one-logit outcome RM"):
        RMRewardFunction(model=prm, tokenizer=tokenizer)
    rm, tokenizer = init_reward_model("outcome", policy_dir)
    with pytest.raises(ValueError, match="no records"):
        train_reward_model("outcome", rm, tokenizer, [], tmp_path / "rm")
    assert math.isfinite(float(score_outcome(rm, tokenizer, ["1+1="], ["2"])[0]))


def test_scratch_init_keeps_the_architecture_not_the_weights(policy_dir):
    policy = AutoModelForCausalLM.from_pretrained(policy_dir)
    rm, tokenizer = init_reward_model("process", policy_dir, init="scratch", seed=1)
    again, _ = init_reward_model("process", policy_dir, init="scratch", seed=1)
    other, _ = init_reward_model("process", policy_dir, init="scratch", seed=2)
    policy_body, body = dict(policy.model.named_parameters()), dict(rm.model.named_parameters())
    assert policy_body.keys() == body.keys() and rm.config.num_labels == 2
    weights = [k for k in body if k.endswith("proj.weight")]
    assert weights and not any(torch.equal(policy_body[k], body[k]) for k in weights)  # random, not the policy's
    assert all(torch.equal(body[k], dict(again.model.named_parameters())[k]) for k in body)  # seeded
    assert not torch.equal(body[weights[0]], dict(other.model.named_parameters())[weights[0]])
    with pytest.raises(ValueError, match="rm_init: unknown value 'random'"):
        init_reward_model("process", policy_dir, init="random")
