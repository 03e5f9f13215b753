"""benchmarks/eval_real.py (the harness on the real model before / after issue 37, and lm-eval's HF backend) on a tiny
random Llama with a SmolLM2-shaped chat tokenizer, in seconds: the JSON's shape and what it records, no timings."""

from __future__ import annotations

import json
import logging

import pytest

from benchmarks import eval_real


@pytest.fixture(autouse=True)
def grpo_ext_log_level():
    """eval_real.main quiets the package's logger (a benchmark's output is its table); restored here, as the tests
    after this one read the package's INFO lines (tests/test_qlora.py's memory footprint)."""
    logger = logging.getLogger("grpo_ext")
    level = logger.level
    yield
    logger.setLevel(level)


def test_eval_real_json_on_a_tiny_model(tmp_path, tiny_chat_llama_folder):
    folder = tiny_chat_llama_folder
    argv = ["--model", str(folder), "--problems", "2", "--n", "2", "--reps", "2", "--warmup-problems", "1"]
    argv += ["--max-tokens", "3", "--after-batch", "2", "--out-name", str(tmp_path / "eval_real")]
    payload = eval_real.main(argv)

    saved = json.loads((tmp_path / "eval_real.json").read_text())
    assert saved["results"].keys() == payload["results"].keys() == {"before", "after", "lm_eval"}
    assert saved["params"]["before_batch"] == 8 and saved["params"]["lm_eval_rows"] == 4
    assert saved["task_kwargs"] == eval_real.PROMPTS["study"] and saved["device"] == "cpu"
    assert set(saved["ratios"]) == {"after/before", "lm_eval/before", "after/lm_eval"}
    assert len(saved["ratios"]["after/before"]["cpu"]["values"]) == 2  # one paired ratio a chunk
    for side, res in saved["results"].items():
        assert res["cpu_seconds"]["n"] == 2 and len(res["per_problem_pass@1"]) == 2, side
        assert 1 <= res["tokens_per_sample"] <= 3 and res["samples_per_cpu_second"] > 0, side
        assert res["pass@1"]["low"] <= res["pass@1"]["estimate"] <= res["pass@1"]["high"]
    assert saved["results"]["before"]["dtype"] == "float32" and "pass@1_minus_before" in saved["results"]["after"]
    assert saved["results"]["after"]["params"]["stop"] == ["Question:"]
    assert saved["results"]["before"]["params"]["stop"] == []
    assert saved["results"]["lm_eval"]["positions_per_sample"] >= saved["results"]["lm_eval"]["tokens_per_sample"]
    assert "| before: float32" in saved["table"] and isinstance(saved["pass"], bool)
