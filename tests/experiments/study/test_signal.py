"""The learning-signal measurement (grpo_ext.experiments.study.signal): its math by hand and by brute force, the GRPO
minibatch gradient against autograd of the explicit formula, and the CLI's JSON."""

from __future__ import annotations

import itertools
import json
import math

import pytest
import torch

from grpo_ext.advantages import outcome_advantages
from grpo_ext.experiments.study.signal import (
    jackknife_interval,
    measure_signal,
    minibatch_gradient,
    pairwise_cosine,
    row_weights,
)
from grpo_ext.experiments.study.signal.cli import main
from grpo_ext.tasks import get_task


def test_pairwise_cosine_by_hand():
    # (1, 0) . (0, 1) = 0; (1, 0) and (0, 1) each at 45 degrees from (1, 1)
    mean, values = pairwise_cosine([torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]), torch.tensor([1.0, 1.0])])
    s = 1 / math.sqrt(2)
    assert values.tolist() == pytest.approx([0.0, s, s])
    assert float(mean) == pytest.approx(2 * s / 3)


def test_pairwise_cosine_against_a_loop_and_zero_gradients():
    grads = list(torch.randn(5, 40, generator=torch.Generator().manual_seed(0)))
    mean, values = pairwise_cosine(grads)
    expected = [float(torch.nn.functional.cosine_similarity(a, b, dim=0)) for a, b in itertools.combinations(grads, 2)]
    assert values.tolist() == pytest.approx(expected, abs=1e-6)
    assert float(mean) == pytest.approx(sum(expected) / len(expected), abs=1e-6)
    _, values = pairwise_cosine([torch.zeros(3), torch.ones(3)])  # no direction: 0, not NaN
    assert values.tolist() == [0.0]
    with pytest.raises(ValueError, match=r"gradients \[1\] are not finite"):  # broken, not "no signal"
        pairwise_cosine([torch.ones(3), torch.tensor([1.0, float("nan"), 0.0]), torch.ones(3)])


def test_jackknife_matches_leave_one_out_by_hand():
    grads = list(torch.randn(4, 30, generator=torch.Generator().manual_seed(1)))
    _, values = pairwise_cosine(grads)
    result = jackknife_interval(values, 4)
    leave_out = torch.tensor([float(pairwise_cosine(grads[:k] + grads[k + 1 :])[0]) for k in range(4)])
    se = math.sqrt(3 / 4 * float(((leave_out - leave_out.mean()) ** 2).sum()))
    assert result["standard_error"] == pytest.approx(se)
    assert result["low"] == pytest.approx(result["mean"] - 3.182 * se)  # t quantile, 3 degrees of freedom
    assert jackknife_interval(values[:1], 2)["low"] is None  # two minibatches: no interval


def _batch(tokenizer):
    """Two prompts x two completions of different lengths (EOS kept on all but one truncated row)."""
    prompts = ["12+3=", "12+3=", "7-5=", "7-5="]
    completions = ["12+3=15;#15", "12+3=16;#1", "7-5=2;#2", "7-"]
    prompt_ids = [tokenizer(p)["input_ids"] for p in prompts]
    eos = [tokenizer.eos_token_id]
    completion_ids = [tokenizer(c, add_special_tokens=False)["input_ids"] + eos for c in completions[:3]]
    completion_ids.append(tokenizer(completions[3], add_special_tokens=False)["input_ids"])
    return prompt_ids, completion_ids


def _explicit_gradient(model, prompt_ids, completion_ids, advantages, loss_type):
    """Autograd of -sum_i A_i w_i sum_t log p(token_t | prefix), one unpadded sequence at a time."""
    model.zero_grad(set_to_none=True)
    total_tokens = sum(len(c) for c in completion_ids)
    loss = 0.0
    for p, c, a in zip(prompt_ids, completion_ids, advantages.tolist(), strict=True):
        logits = model(input_ids=torch.tensor([p + c])).logits[0]
        logp = sum(torch.log_softmax(logits[len(p) - 1 + t], dim=-1)[c[t]] for t in range(len(c)))
        weight = 1 / total_tokens if loss_type == "dapo" else 1 / (len(completion_ids) * len(c))
        loss = loss - a * weight * logp
    loss.backward()
    grad = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    model.zero_grad(set_to_none=True)
    return grad


@pytest.mark.parametrize("loss_type", ["dapo", "grpo"])
def test_grpo_gradient_is_the_advantage_weighted_log_prob_gradient(tiny_char_llama, loss_type):
    model, tokenizer = tiny_char_llama()
    prompt_ids, completion_ids = _batch(tokenizer)
    advantages = outcome_advantages(torch.tensor([1.0, 0.0, 1.0, 0.0]), group_size=2)
    weights = row_weights(torch.tensor([len(c) for c in completion_ids]), loss_type)
    expected = _explicit_gradient(model, prompt_ids, completion_ids, advantages, loss_type)
    for micro_batch in (1, 64):  # accumulated row by row or in one forward: the same gradient
        grad = minibatch_gradient(model, prompt_ids, completion_ids, advantages, weights, micro_batch=micro_batch)
        torch.testing.assert_close(grad, expected, rtol=1e-4, atol=1e-6)
    same = minibatch_gradient(model, prompt_ids, completion_ids, advantages, weights)
    assert float(pairwise_cosine([grad, same])[0]) == pytest.approx(1.0)  # identical minibatches: cosine 1


def test_all_equal_rewards_give_a_zero_gradient(tiny_char_llama):
    model, tokenizer = tiny_char_llama()
    prompt_ids, completion_ids = _batch(tokenizer)
    advantages = outcome_advantages(torch.ones(4), group_size=2)
    weights = row_weights(torch.tensor([len(c) for c in completion_ids]))
    grad = minibatch_gradient(model, prompt_ids, completion_ids, advantages, weights)
    assert torch.isfinite(grad).all() and not grad.any()
    mean, _ = pairwise_cosine([grad, grad])
    assert float(mean) == 0.0


def test_measure_signal_is_device_strict_and_leaves_the_model_as_it_was(tiny_char_llama):
    # Every tensor made without a device lands on "meta" and fails against the model's CPU tensors (as a CPU tensor
    # would against a GPU model). LoRA is wrapped outside: PEFT creates its layers on the default device first.
    model, tokenizer = tiny_char_llama()
    task = get_task("arithmetic")
    kwargs = {"group_size": 4, "max_completion_length": 12, "progress": False}
    with torch.device("meta"):
        grpo = measure_signal(model, tokenizer, task, "grpo", 8, 3, **kwargs)
        sft = measure_signal(model, tokenizer, task, "sft", 8, 3, **kwargs)
    assert grpo["zero_std_share"] == 1.0 and grpo["mean_cosine"] == 0.0  # a random model never answers right
    assert sft["group_size"] == 1 and sft["prompts"] == 8 and -1 < sft["mean_cosine"] < 1
    lora = measure_signal(model, tokenizer, task, "sft", 8, 3, lora_rank=2, **kwargs)
    total = sum(p.numel() for p in model.parameters())
    assert 0 < lora["trainable_parameters"] < total and all(g > 0 for g in lora["grad_norms"])
    assert type(model).__name__ == "LlamaForCausalLM" and all(p.requires_grad for p in model.parameters())
    assert not any("lora" in name for name, _ in model.named_modules()) and not model.training


def test_cli_writes_the_table_and_json(tmp_path, capsys):
    out = tmp_path / "signal.json"
    argv = ["--model", "embedded", "--objective", "grpo,sft", "--samples", "16", "--minibatches", "3"]
    main([*argv, "--device", "cpu", "--train-offset", "2500", "--out", str(out)])
    assert "| objective | samples | prompts x G | LoRA r | mean cosine |" in capsys.readouterr().out
    result = json.loads(out.read_text())
    assert [(r["objective"], r["prompts"], r["group_size"]) for r in result["rows"]] == [("grpo", 2, 8), ("sft", 16, 1)]
    fields = {"samples", "lora_rank", "mean_cosine", "low", "high", "zero_std_share", "seconds", "pair_cosines"}
    assert all(fields <= set(r) for r in result["rows"])
    assert len(result["rows"][0]["pair_cosines"]) == 3 and result["rows"][0]["low"] <= result["rows"][0]["high"]
    assert result["settings"]["train_offset"] == 2500 and result["model"] == "embedded"
