"""`generation_backend: sampler`: GRPO's completions drawn by the harness's continuous sampler (grpo_ext.rollouts).

Checked against the harness (the same completions for the same seed), against TRL's own path (the same losses and
weights given the same completions), against transformers' warpers (top-k / min-p), and on LoRA and QLoRA policies
whose adapters the optimizer updates in place under a compiled decode step."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig
from transformers.generation.logits_process import (
    LogitsProcessorList,
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from grpo_ext.errors import UserError
from grpo_ext.policy_loading import ALL_LINEAR, policy_init
from grpo_ext.rollouts import rollout_seed, sample_completions, sampler_settings
from grpo_ext.sampler import static_step
from grpo_ext.sampler.sampling import SamplingParams, sample
from grpo_ext.sampler.token_draws import token_cdf
from tests.test_qlora import parity_reward, qlora_model_args
from tests.trainer_utils import GRPOExtTrainer, tiny_args, tiny_trainer

HOT = dict(temperature=1.6, max_completion_length=20)  # the embedded base's samples differ at this temperature


def _completions(out) -> list[list[int]]:
    return [ids[mask.bool()].tolist() for ids, mask in zip(out["completion_ids"], out["completion_mask"], strict=True)]


def test_rollouts_are_the_harness_samples_for_the_same_seed_and_keep_trls_form(tmp_path):
    trainer = tiny_trainer(args=tiny_args(tmp_path=tmp_path, generation_backend="sampler", **HOT))
    tokenizer, data = trainer.processing_class, trainer.train_dataset
    trainer.model.train()
    rounds = []
    for rollout, rows in enumerate(([0, 1], [2, 0])):  # the second round repeats prompt 0 with a new seed
        batch = [data[i] for i in rows for _ in range(4)]
        out = trainer._generate_and_score_completions(batch)
        texts = tokenizer.batch_decode(_completions(out), skip_special_tokens=True)
        params = SamplingParams(n=4, temperature=1.6, max_new_tokens=20, seed=rollout_seed(0, rollout, 0))
        harness = sample(trainer.model, tokenizer, [data[i]["prompt"] for i in rows], params, progress=False)
        assert texts == [t for group in harness for t in group]
        rounds.append(texts)
        for ids in _completions(out):  # TRL's form: up to and including the first EOS, at most 20 tokens
            eos = [k for k, t in enumerate(ids) if t == tokenizer.eos_token_id]
            assert eos in ([], [len(ids) - 1]) and len(ids) <= 20 and (eos or len(ids) == 20)
    assert len(set(rounds[0][:4])) > 1  # the samples of a group differ: the comparison is not vacuous
    assert rounds[0][:4] != rounds[1][4:]  # prompt 0 again, in a new round: a new draw
    assert trainer.extension_state()["sampler_rollouts"] == 2 and trainer.model.training


def test_with_the_same_completions_the_trainer_matches_trls_path(tmp_path, monkeypatch):
    """Trained twice from the same start: once drawing with the sampler, once through TRL's path fed the sampler's
    completions (in place of `generate`). Losses and weights agree bit for bit."""
    drawn = []
    sampler = tiny_trainer(args=tiny_args(tmp_path=tmp_path / "s", max_steps=2, generation_backend="sampler", **HOT))
    original = GRPOExtTrainer._generate_single_turn

    def record(self, *args, **kwargs):
        ids, logprobs = original(self, *args, **kwargs)
        drawn.append(ids)
        return ids, logprobs

    monkeypatch.setattr(GRPOExtTrainer, "_generate_single_turn", record)
    sampler.train()
    monkeypatch.undo()
    replay = iter(drawn)
    monkeypatch.setattr("trl.GRPOTrainer._generate_single_turn", lambda self, *a, **k: (next(replay), None))
    trl_path = tiny_trainer(args=tiny_args(tmp_path=tmp_path / "t", max_steps=2, **HOT))
    trl_path.train()
    losses = [[h["loss"] for h in t.state.log_history if "loss" in h] for t in (sampler, trl_path)]
    assert len(drawn) == 2 and len(losses[0]) == 2 and losses[0] == losses[1]
    for (name, a), b in zip(sampler.model.named_parameters(), trl_path.model.parameters(), strict=True):
        assert torch.equal(a, b), name


def test_settings_follow_trls_generation_kwargs_and_name_what_they_cannot_honour(tmp_path):
    base = dict(
        max_new_tokens=32,
        do_sample=True,
        temperature=0.7,
        top_p=0.9,
        top_k=0,
        min_p=None,
        bos_token_id=1,
        pad_token_id=0,
        eos_token_id=[2],
        repetition_penalty=1.0,
        cache_implementation=None,
    )
    s = sampler_settings(base | {"top_k": 50, "min_p": 0.05}, "auto", [2, 7], 0)
    assert (s.max_new_tokens, s.temperature, s.top_p, s.top_k, s.min_p, s.eos_ids) == (32, 0.7, 0.9, 50, 0.05, (2, 7))
    assert sampler_settings(base | {"do_sample": False}, "eager", [], 0).temperature == 0.0  # greedy
    assert sampler_settings(base, "eager", [], 0).eos_ids == (2,)  # the kwargs' EOS when TRL's list is empty
    with pytest.raises(UserError, match="repetition_penalty: 1.3 cannot be honoured"):
        sampler_settings(base | {"repetition_penalty": 1.3}, "auto", [2], 0)
    with pytest.raises(UserError, match="generation_kwargs: no_repeat_ngram_size, num_beams cannot be honoured"):
        sampler_settings(base | {"num_beams": 4, "no_repeat_ngram_size": 3}, "auto", [2], 0)
    with pytest.raises(UserError, match="sampler_decode: unknown value 'fast'"):
        sampler_settings(base, "fast", [2], 0)
    with pytest.raises(UserError, match="generation_backend: `sampler` and use_vllm"):
        tiny_args(tmp_path=tmp_path, generation_backend="sampler", use_vllm=True)
    with pytest.raises(UserError, match="generation_backend: unknown value 'vllm'"):
        tiny_args(tmp_path=tmp_path, generation_backend="vllm")
    with pytest.raises(UserError, match="generation_kwargs: num_beams cannot be honoured"):
        tiny_trainer(
            args=tiny_args(tmp_path=tmp_path, generation_backend="sampler", generation_kwargs={"num_beams": 2})
        )


@pytest.mark.parametrize("top_k, top_p, min_p", [(5, 1.0, None), (0, 1.0, 0.1), (8, 0.8, 0.02)])
def test_top_k_and_min_p_keep_the_tokens_generate_keeps(top_k, top_p, min_p):
    torch.manual_seed(0)
    logits = torch.randn(6, 40) * 3
    warpers = LogitsProcessorList([TemperatureLogitsWarper(0.7)])
    warpers += [TopKLogitsWarper(top_k)] if top_k else []
    warpers += [TopPLogitsWarper(top_p)] if top_p < 1 else []
    warpers += [MinPLogitsWarper(min_p)] if min_p is not None else []
    expected = torch.softmax(warpers(None, logits.clone()), dim=-1).double()
    cdf = token_cdf(logits, 0.7, top_p, top_k, min_p)
    probabilities = torch.diff(cdf, dim=-1, prepend=torch.zeros(6, 1, dtype=cdf.dtype))
    torch.testing.assert_close(probabilities, expected)
    kept = (expected > 0).sum(dim=-1)
    assert (kept < 40).all() and (top_k == 0 or (kept <= top_k).all())  # the filters removed tokens


def _policy_trainer(tmp_path, quantized: bool, **overrides):
    args = tiny_args(
        tmp_path=tmp_path, generation_backend="sampler", max_steps=2, learning_rate=5e-2, **HOT, **overrides
    )
    if quantized:
        _, quantization_config, peft_config = policy_init(qlora_model_args(), args)
    else:
        quantization_config, peft_config = None, LoraConfig(r=8, target_modules=ALL_LINEAR, lora_dropout=0.0)
    return tiny_trainer(
        args=args, reward_funcs=[parity_reward], quantization_config=quantization_config, peft_config=peft_config
    )


@pytest.mark.parametrize("quantized", [False, True], ids=["lora", "qlora"])
def test_lora_and_qlora_policies_train_and_compiled_steps_see_the_updated_adapters(tmp_path, monkeypatch, quantized):
    """The decode step compiled once (dynamo with the eager backend: its graphs and guards, CPU-fast), then the
    optimizer updates the adapters in place: the compiled step still draws what the eager step draws."""
    monkeypatch.setattr(static_step, "COMPILE_OPTIONS", {"backend": "eager", "dynamic": None})
    torch._dynamo.reset()
    trainer = _policy_trainer(tmp_path, quantized, sampler_decode="compiled")
    data = trainer.train_dataset
    prompts = [data[i]["prompt"] for i in (0, 1) for _ in range(4)]
    ids = [trainer.processing_class(p)["input_ids"] for p in prompts]

    def draw(decode):
        settings = trainer._sampler.__class__(**{**trainer._sampler.__dict__, "decode": decode})
        trainer.model.eval()
        return sample_completions(trainer.model, ids, prompts, seed=11, settings=settings)

    before = draw("compiled")
    assert before == draw("eager")
    adapters = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    trainer.train()  # two steps, each generated by the compiled step
    assert trainer.state.global_step == 2
    changed = [n for n, p in trainer.model.named_parameters() if p.requires_grad and not torch.equal(p, adapters[n])]
    assert changed  # the optimizer moved the adapters (in place)
    after = draw("compiled")
    assert after == draw("eager") and after != before
