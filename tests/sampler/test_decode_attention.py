"""The continuous sampler's CPU decode attention (grpo_ext.sampler.decode_attention) and the shared prompt prefix
(prefilled once, attended to by every row without being copied into the slots): the same attention as sdpa, and the
same samples as the brute-force reference on a float32 model (CPU models get it by default; forced here, so that a
change of the default leaves these tests on it)."""

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from grpo_ext.model_paths import resolve_model_path
from grpo_ext.sampler import decode_attention
from grpo_ext.sampler import decoder as decode_loop
from grpo_ext.sampler.continuous import continuous_sample
from grpo_ext.sampler.decode_attention import cpu_decode_attention, decode_attention_forward, uses_decode_attention
from grpo_ext.sampler.sampling import SamplingParams, derive_seed, encode_prompt_ids, sample
from grpo_ext.sampler.slot_cache import shared_prefix_length
from grpo_ext.tasks import get_task
from tests.sampler.test_continuous import _reference


class _Attention(torch.nn.Module):
    """What the attention functions read of a layer."""

    def __init__(self, groups: int, layer_idx: int = 0):
        super().__init__()
        self.num_key_value_groups, self.layer_idx, self.is_causal = groups, layer_idx, True


def _inputs(batch=5, heads=6, kv_heads=2, columns=11, capacity=16, dim=8, seed=0):
    """One query a row; keys/values as the slot cache hands them over (the first `columns` of `capacity` columns,
    the rest zeros); a boolean mask with some left columns hidden per row."""
    g = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, heads, 1, dim, generator=g)
    keys = torch.zeros(batch, kv_heads, capacity, dim)
    values = torch.zeros(batch, kv_heads, capacity, dim)
    keys[:, :, :columns] = torch.randn(batch, kv_heads, columns, dim, generator=g)
    values[:, :, :columns] = torch.randn(batch, kv_heads, columns, dim, generator=g)
    mask = torch.ones(batch, 1, 1, columns, dtype=torch.bool)
    for row in range(batch):
        mask[row, ..., : row % 4] = False  # a row that took its slot later sees fewer columns
    return query, keys[:, :, :columns], values[:, :, :columns], mask


def test_decode_attention_equals_sdpa_on_strided_slot_views():
    query, keys, values, mask = _inputs()
    assert not keys.is_contiguous()  # a view of the whole buffer, as the slot cache's layers give it
    module = _Attention(groups=3)
    expected, _ = sdpa_attention_forward(module, query, keys, values, mask, scaling=0.3)
    got, weights = decode_attention_forward(module, query, keys, values, mask, scaling=0.3)
    assert weights is None and got.shape == expected.shape == (5, 1, 6, 8)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    # a float (additive) mask and no mask
    additive = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    got_additive, _ = decode_attention_forward(module, query, keys, values, additive, scaling=0.3)
    torch.testing.assert_close(got_additive, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        decode_attention_forward(module, query, keys, values, None, scaling=0.3)[0],
        sdpa_attention_forward(module, query, keys, values, None, scaling=0.3)[0],
    )


def test_decode_attention_with_a_shared_prefix_equals_sdpa_over_prefix_and_own_columns():
    query, keys, values, mask = _inputs(seed=1)
    g = torch.Generator().manual_seed(2)
    prefix = (torch.randn(2, 7, 8, generator=g), torch.randn(2, 7, 8, generator=g))  # [KV heads, P, dim], every row's
    whole_keys = torch.cat([prefix[0].expand(5, -1, -1, -1), keys], dim=2)
    whole_values = torch.cat([prefix[1].expand(5, -1, -1, -1), values], dim=2)
    whole_mask = torch.cat([torch.ones(5, 1, 1, 7, dtype=torch.bool), mask], dim=-1)
    module = _Attention(groups=3, layer_idx=1)
    expected, _ = sdpa_attention_forward(module, query, whole_keys, whole_values, whole_mask, scaling=0.3)
    decode_attention._prefix = [None, prefix]  # what cpu_decode_attention(prefix=...) sets for the forward
    try:
        got, _ = decode_attention_forward(module, query, keys, values, mask, scaling=0.3)
    finally:
        decode_attention._prefix = None
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_more_than_one_query_goes_to_sdpa():
    g = torch.Generator().manual_seed(3)
    query, keys, values = (torch.randn(2, 4, 5, 8, generator=g), *torch.randn(2, 2, 2, 5, 8, generator=g))
    module = _Attention(groups=2)
    torch.testing.assert_close(
        decode_attention_forward(module, query, keys, values, None, scaling=0.5)[0],
        sdpa_attention_forward(module, query, keys, values, None, scaling=0.5)[0],
    )


def test_the_switch_is_for_cpu_models_on_sdpa_and_is_restored(tiny_char_llama):
    model, _ = tiny_char_llama()
    assert model.config._attn_implementation == "sdpa"
    assert uses_decode_attention(model)  # float32 too: the shared prefix is prefilled once
    assert uses_decode_attention(model.to(torch.bfloat16))
    with pytest.raises(RuntimeError), cpu_decode_attention(model, prefix=["p"]):
        assert model.config._attn_implementation == decode_attention.NAME and decode_attention._prefix == ["p"]
        raise RuntimeError
    assert model.config._attn_implementation == "sdpa" and decode_attention._prefix is None
    with cpu_decode_attention(model, enabled=False):
        assert model.config._attn_implementation == "sdpa"


def test_shared_prefix_length():
    assert shared_prefix_length([[1, 2, 3, 4], [1, 2, 3, 5, 6], [1, 2, 9]]) == 2
    assert shared_prefix_length([[1, 2, 3], [1, 2, 3]]) == 2  # each prompt keeps a token of its own
    assert shared_prefix_length([[1, 2, 3]]) == 2
    assert shared_prefix_length([[5, 1], [6, 1]]) == 0


@pytest.fixture(scope="module")
def embedded():
    path = resolve_model_path("embedded")
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval(), AutoTokenizer.from_pretrained(path)


@pytest.fixture
def forced(monkeypatch):
    """The decode attention and the shared prefix on, whatever the default rule says."""
    monkeypatch.setattr(decode_loop, "uses_decode_attention", lambda model: True)
    prefills = []
    original = decode_loop.prefill
    monkeypatch.setattr(
        decode_loop, "prefill", lambda *a, **k: (prefills.append(k.get("prefix") is not None), original(*a, **k))[1]
    )
    return prefills


@torch.no_grad()
def test_shared_prefix_samples_equal_the_brute_force_reference(embedded, forced):
    """Prompts with an 18-token prefix in common, 4 slots (forks wait, the cache compacts and shrinks): every sample
    equals the reference that recomputes it alone from the whole prompt."""
    model, tok = embedded
    shots = "1+1=2;2+2=4;3+3=6;"
    prompts = [shots + p for p in get_task("arithmetic").load("test", 5)["prompt"]]
    prompt_ids = encode_prompt_ids(tok, prompts)
    assert shared_prefix_length(prompt_ids) >= decode_loop.SHARED_PREFIX_MIN
    seeds = [[derive_seed(4, j, i) for i in range(4)] for j in range(len(prompts))]
    got = dict(
        continuous_sample(
            model,
            prompt_ids,
            seeds,
            max_new_tokens=60,
            temperature=1.5,
            top_p=1.0,
            slots=4,
            prefill_batch=2,
            eos_ids=[tok.eos_token_id],
            pad_id=tok.pad_token_id,
        )
    )
    assert forced[0] is False and all(forced[1:])  # the prefix alone, then the prompts after it
    pairs = [
        (a, _reference(model, prompt_ids[j], s, 60, 1.5, 1.0, tok.eos_token_id))
        for j in got
        for a, s in zip(got[j], seeds[j], strict=True)
    ]
    assert len(pairs) == 20 and sum(a == b for a, b in pairs) >= len(pairs) - 1
    assert len({len(a) for a, _ in pairs}) > 3


@torch.no_grad()
def test_forced_decode_attention_gives_the_samples_of_sdpa(tiny_char_llama, monkeypatch):
    """Grouped-query attention (4 heads on 2), short prompts without a shared prefix: the same samples either way."""
    model, tok = tiny_char_llama()
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=20, batch_size=2)
    prompts = ["12+3=", "7-5=", "40+41="]
    plain = sample(model, tok, prompts, params, progress=False)
    monkeypatch.setattr(decode_loop, "uses_decode_attention", lambda m: True)
    forced = sample(model, tok, prompts, params, progress=False)
    same = sum(a == b for x, y in zip(plain, forced, strict=True) for a, b in zip(x, y, strict=True))
    assert same >= 11
    assert np.mean([len(s) for x in forced for s in x]) > 3
