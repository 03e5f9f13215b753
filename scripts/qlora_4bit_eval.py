"""Diagnostic (issue 28): the main job's adapters scored on the model they were trained on (the 4-bit base)
against the 4-bit base itself, next to the search's numbers (adapter merged into the fp32 base vs the fp32 base).
Validation, 1,000 problems x 16, T = 0.7, seed 0 (the search's evaluation settings). Writes
``results/stage_design/qlora_4bit_eval.json``.

    OMP_NUM_THREADS=1 python scripts/qlora_4bit_eval.py results/main_job_search/runs/*/model
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "results" / "stage_design" / "qlora_4bit_eval.json"


def main(adapters: list[str]) -> dict:
    import numpy as np
    from peft import PeftModel
    from transformers import AutoTokenizer

    from grpo_ext.model_paths import EMBEDDED_MODEL_DIR
    from grpo_ext.qlora_base import load_as_main_job
    from grpo_ext.sampler.sampling import SamplingParams, sample
    from grpo_ext.tasks import get_task

    task = get_task("arithmetic", min_operands=2, max_operands=4, digits=2, operators="+-")
    problems = task.load("validation", 1000)
    tokenizer = AutoTokenizer.from_pretrained(EMBEDDED_MODEL_DIR)

    def score(model) -> float:
        model.eval()
        params = SamplingParams(n=16, temperature=0.7, seed=0, batch_size=64)
        out = sample(model, tokenizer, problems["prompt"], params)
        right = [np.mean([task.is_correct(c, a) for c in cs]) for cs, a in zip(out, problems["answer"], strict=True)]
        return float(np.mean(right))

    results = {}
    for name in ["base", *adapters]:
        t = time.time()
        model = load_as_main_job(EMBEDDED_MODEL_DIR)
        if name != "base":
            model = PeftModel.from_pretrained(model, Path(name))
        results[name] = score(model)
        print(name, round(results[name], 4), f"{time.time() - t:.0f} s", flush=True)
    OUT.write_text(json.dumps(results, indent=1) + "\n")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
