"""Continuous batching (grpo_ext.sampler.continuous): the counter RNG, the token choice, and whole runs against a
brute-force reference that recomputes every sample alone, token by token, with no cache."""

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from grpo_ext.model_paths import resolve_model_path
from grpo_ext.sampler.continuous import continuous_sample
from grpo_ext.sampler.sampling import SamplingParams, derive_seed, encode_prompt_ids, sample
from grpo_ext.sampler.token_draws import choose_tokens, counter_uniforms
from grpo_ext.tasks import get_task


@pytest.fixture(scope="module")
def embedded():
    """The shipped model: it ends its samples with EOS after 5-40 tokens, so slots free up at different times."""
    path = resolve_model_path("embedded")
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval(), AutoTokenizer.from_pretrained(path)


# ---- pure functions ----------------------------------------------------------------------------------------------


def test_counter_uniforms_are_a_pure_uniform_function_of_seed_and_counter():
    seeds = np.array([derive_seed(0, "a", i) for i in range(4)], dtype=np.uint64)
    a = counter_uniforms(seeds, np.arange(4, dtype=np.uint64))
    assert np.array_equal(a, counter_uniforms(seeds, np.arange(4, dtype=np.uint64)))  # same pair, same number
    assert np.array_equal(a[2:], counter_uniforms(seeds[2:], np.arange(2, 4, dtype=np.uint64)))  # not positional
    assert len(set(a.tolist())) == 4
    # 200,000 draws of one seed: the empirical CDF stays within 0.005 of the uniform one (KS bound ~0.004 at 1%)
    u = np.sort(counter_uniforms(np.uint64(12345), np.arange(200_000, dtype=np.uint64)))
    assert u[0] >= 0 and u[-1] < 1
    assert np.abs(u - (np.arange(1, u.size + 1) / u.size)).max() < 0.005
    # neighbouring seeds are not correlated
    v = counter_uniforms(np.uint64(12346), np.arange(200_000, dtype=np.uint64))
    w = counter_uniforms(np.uint64(12345), np.arange(200_000, dtype=np.uint64))
    assert abs(np.corrcoef(v, w)[0, 1]) < 0.01


def test_choose_tokens_draws_from_the_tempered_nucleus():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log().unsqueeze(0)
    grid = torch.arange(1000, dtype=torch.float64).add(0.5).div(1000)  # evenly spaced uniforms: exact frequencies

    def frequencies(temperature, top_p):
        tokens = choose_tokens(logits.expand(1000, -1), grid, temperature, top_p)
        return torch.bincount(tokens, minlength=4).double() / 1000

    assert torch.allclose(frequencies(1.0, 1.0), probs.double(), atol=1e-3)
    # top_p 0.8 keeps the smallest set reaching 0.8: tokens 0 and 1, renormalised (hand-worked: 0.625, 0.375)
    assert torch.allclose(frequencies(1.0, 0.8), torch.tensor([0.625, 0.375, 0, 0], dtype=torch.float64), atol=1e-3)
    # temperature 0.5 squares the probabilities before renormalising
    squared = probs.double() ** 2 / (probs.double() ** 2).sum()
    assert torch.allclose(frequencies(0.5, 1.0), squared, atol=1e-3)
    assert choose_tokens(torch.tensor([[0.0, 3.0, 1.0], [5.0, 0.0, 0.0]]), None, 0, 1.0).tolist() == [1, 0]


# ---- whole runs ----------------------------------------------------------------------------------------------------


def _reference(model, prompt_ids, seed, max_new_tokens, temperature, top_p, eos):
    """One sample alone: a full forward over prompt + tokens so far for every new token (no cache, no padding)."""
    ids = list(prompt_ids)
    for t in range(max_new_tokens):
        logits = model(input_ids=torch.tensor([ids])).logits[:, -1, :]
        u = torch.from_numpy(counter_uniforms(np.array([seed], dtype=np.uint64), np.array([t], dtype=np.uint64)))
        token = int(choose_tokens(logits, u, temperature, top_p)[0])
        ids.append(token)
        if token == eos:
            break
    return ids[len(prompt_ids) :]


@torch.no_grad()
def test_continuous_sampling_equals_the_brute_force_reference(embedded):
    model, tok = embedded
    prompts = list(get_task("arithmetic").load("test", 7)["prompt"]) + ["5=", "12+34-56+78-90+1="]  # long and short
    prompt_ids = encode_prompt_ids(tok, prompts)
    seeds = [[derive_seed(9, j, i) for i in range(3)] for j in range(len(prompts))]
    expected = {
        j: [_reference(model, prompt_ids[j], s, 30, 0.9, 0.95, tok.eos_token_id) for s in seeds[j]]
        for j in range(len(prompts))
    }
    # 4 slots for 27 samples: rows that fork wait for a slot with a copy of their keys/values, compactions, the final
    # shrink; 32 slots: forks go straight into free slots
    for slots in (4, 32):
        got = dict(
            continuous_sample(
                model,
                prompt_ids,
                seeds,
                max_new_tokens=30,
                temperature=0.9,
                top_p=0.95,
                slots=slots,
                prefill_batch=2,
                eos_ids=[tok.eos_token_id],
                pad_id=tok.pad_token_id,
            )
        )
        assert sorted(got) == list(range(len(prompts)))
        pairs = [(a, b) for j in expected for a, b in zip(got[j], expected[j], strict=True)]
        assert sum(a == b for a, b in pairs) >= len(pairs) - 1  # float rounding may flip one rare draw
    lengths = {len(a) for a, _ in pairs}
    assert len(lengths) > 3 and any(a[-1] == tok.eos_token_id for a, _ in pairs)  # samples ended at various times
    assert len({tuple(a) for a, _ in pairs}) < len(pairs)  # some samples coincide: shared rows were exercised


def test_greedy_equals_generate_on_the_embedded_model(embedded):
    model, tok = embedded
    prompts = list(get_task("arithmetic").load("test", 12)["prompt"])
    greedy = SamplingParams(n=1, temperature=0, max_new_tokens=40, batch_size=3)
    got = sample(model, tok, prompts, greedy, progress=False)
    for prompt, (completion,) in zip(prompts, got, strict=True):
        ids = tok(prompt, return_tensors="pt")
        out = model.generate(**ids, max_new_tokens=40, do_sample=False, pad_token_id=tok.pad_token_id)
        assert tok.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True) == completion


def test_one_new_token_and_empty_inputs(embedded):
    model, tok = embedded
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=1, batch_size=2)
    out = sample(model, tok, ["1+2=", "37+45-18="], params, progress=False)  # every sample ends at its prefill
    assert [len(x) for x in out] == [3, 3] and all(len(c) <= 1 for x in out for c in x)
    assert sample(model, tok, [], params, progress=False) == []
    none = continuous_sample(
        model,
        [[3, 4]],
        [[]],
        max_new_tokens=4,
        temperature=1.0,
        top_p=1.0,
        slots=2,
        prefill_batch=2,
        eos_ids=[tok.eos_token_id],
        pad_id=tok.pad_token_id,
    )
    assert list(none) == []  # a prompt asked for zero samples yields nothing


@torch.no_grad()
def test_long_hot_samples_through_shrinks_and_compactions_equal_the_reference(embedded, monkeypatch):
    """Long, hot samples (T = 2, 80 tokens) in 4 slots: the cache compacts and the batch shrinks (renumbering the
    slots); every sample must still equal the brute-force reference."""
    from grpo_ext.sampler import slot_cache
    from grpo_ext.sampler.decoder import Decoder

    model, tok = embedded
    prompts = list(get_task("arithmetic").load("test", 5)["prompt"])
    prompt_ids = encode_prompt_ids(tok, prompts)
    seeds = [[derive_seed(1, j, i) for i in range(4)] for j in range(len(prompts))]
    events = []
    shrink, compact = Decoder.shrink, slot_cache.SlotCache.compact
    monkeypatch.setattr(Decoder, "shrink", lambda self, *a: (events.append("shrink"), shrink(self, *a))[1])
    monkeypatch.setattr(
        slot_cache.SlotCache, "compact", lambda self, *a, **k: (events.append("compact"), compact(self, *a, **k))[1]
    )
    got = dict(
        continuous_sample(
            model,
            prompt_ids,
            seeds,
            max_new_tokens=80,
            temperature=2.0,
            top_p=1.0,
            slots=4,
            prefill_batch=2,
            eos_ids=[tok.eos_token_id],
            pad_id=tok.pad_token_id,
        )
    )
    assert "shrink" in events and "compact" in events  # both cache operations are exercised
    pairs = [
        (a, _reference(model, prompt_ids[j], s, 80, 2.0, 1.0, tok.eos_token_id))
        for j in got
        for a, s in zip(got[j], seeds[j], strict=True)
    ]
    assert len(pairs) == 20 and sum(a == b for a, b in pairs) >= len(pairs) - 1


# ---- slots sized to the memory ------------------------------------------------------------------------------------


def test_slots_within_counts_keys_and_values_of_every_layer_over_the_capacity():
    from grpo_ext.sampler.slot_cache import slots_within

    # two layers, 2 KV heads of 4 in fp32: keys + values 2 x 2 x 4 x 4 = 64 bytes a column a layer; window 40 has
    # capacity 40 + max(8, 40 // 4) = 50 eager, rounded up to 64 static
    kv = [(torch.zeros(2, 7, 4), torch.zeros(2, 7, 4))] * 2
    per_slot = 2 * 64 * 50
    assert slots_within(kv, 40, 3 * per_slot) == 3
    assert slots_within(kv, 40, 3 * per_slot - 1) == 2
    assert slots_within(kv, 40, 10) == 1  # never zero slots
    assert slots_within(kv, 40, None) is None
    assert slots_within(kv, 40, 3 * 2 * 64 * 64, static=True) == 3
    half = [(torch.zeros(2, 7, 4, dtype=torch.bfloat16), torch.zeros(2, 7, 4, dtype=torch.bfloat16))] * 2
    assert slots_within(half, 40, 3 * per_slot) == 6


@pytest.mark.parametrize("budget", ["given", "free memory"])
def test_slots_that_do_not_fit_the_memory_are_not_allocated_and_samples_do_not_change(
    embedded, monkeypatch, caplog, budget
):
    """A real model's 8 prompts x 64 samples took 512 slots and 15 GB on a 24 GB machine (OOM-killed): the slots now
    shrink to what fits. The per-slot size here is computed from the config, independently of the sampler."""
    from grpo_ext.sampler import decoder as decode_loop

    model, tok = embedded
    prompts = list(get_task("arithmetic").load("test", 4)["prompt"])
    prompt_ids = encode_prompt_ids(tok, prompts)
    seeds = [[derive_seed(3, j, i) for i in range(6)] for j in range(len(prompts))]
    config = model.config
    window = max(map(len, prompt_ids)) + 20
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    per_slot = config.num_hidden_layers * 2 * config.num_key_value_heads * head_dim * 4 * (window + max(8, window // 4))
    kwargs = dict(max_new_tokens=20, temperature=1.0, top_p=1.0, prefill_batch=2, eos_ids=[tok.eos_token_id])
    kwargs["pad_id"] = tok.pad_token_id
    roomy = dict(continuous_sample(model, prompt_ids, seeds, slots=24, kv_budget=10**12, **kwargs))
    if budget == "given":
        cap = {"kv_budget": 3 * per_slot}
    else:  # the default: half of what the device has free
        monkeypatch.setattr(decode_loop, "free_memory", lambda device: 6 * per_slot)
        cap = {}
    with caplog.at_level("INFO", logger=decode_loop.__name__):
        tight = dict(continuous_sample(model, prompt_ids, seeds, slots=24, **kwargs, **cap))
    assert "3 of 24 slots fit" in caplog.text
    assert tight == roomy
