"""benchmarks/fp32_prefix.py on a tiny random float32 Llama with a SmolLM2-shaped chat tokenizer, in seconds: the
prefix side prefills the chat template once, the sdpa side does not, both draw the same samples; no timings."""

from __future__ import annotations

import json

from benchmarks import fp32_prefix
from grpo_ext.sampler import decoder


def test_fp32_prefix_json_on_a_tiny_model(tmp_path, tiny_chat_llama_folder):
    folder = tiny_chat_llama_folder
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
