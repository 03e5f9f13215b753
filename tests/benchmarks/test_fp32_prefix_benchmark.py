"""benchmarks/fp32_prefix.py on a tiny random float32 Llama with a SmolLM2-shaped chat tokenizer, in seconds: the
prefix side prefills the chat template once, the sdpa side does not, both draw the same samples; no timings."""

from __future__ import annotations

import json

import torch

from benchmarks import fp32_prefix
from grpo_ext.sampler import decoder


def test_fp32_prefix_json_on_a_tiny_model(tmp_path, tiny_chat_tokenizer):
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tiny_chat_tokenizer)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    folder = tmp_path / "tiny"
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    rule, find = decoder.uses_decode_attention, decoder.shared_prefix_length

    argv = ["--model", str(folder), "--problems", "3", "--n", "2,4", "--reps", "1"]
    payload = fp32_prefix.main([*argv, "--out-name", str(tmp_path / "fp32_prefix")])

    saved = json.loads((tmp_path / "fp32_prefix.json").read_text())
    assert [r["n"] for r in saved["results"]] == [2, 4] and saved["results"] == payload["results"]
    assert saved["prompts"]["shared_prefix"] >= decoder.SHARED_PREFIX_MIN  # the chat template's system turn
    for result in saved["results"]:
        assert result["shared_prefix_tokens"] == {"sdpa": 0, "prefix": saved["prompts"]["shared_prefix"]}
        assert result["same_samples"] >= result["samples"] - 1 and result["samples"] == 3 * result["n"]
        assert result["samples_per_cpu_second"]["prefix"] > 0 and len(result["speedup"]["values"]) == 1
    assert (decoder.uses_decode_attention, decoder.shared_prefix_length) == (rule, find)  # restored
