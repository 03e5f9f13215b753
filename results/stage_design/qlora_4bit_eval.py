"""Diagnostic (issue 28): the main job's adapters scored on the model they were trained on (the 4-bit base)
against the 4-bit base itself, next to the search's numbers (adapter merged into the fp32 base vs the fp32 base).
Validation, 1,000 problems x 16, T = 0.7, seed 0 (the search's evaluation settings).

    OMP_NUM_THREADS=1 PYTHONPATH=. python results/stage_design/qlora_4bit_eval.py results/main_job_search/runs/*/model
"""

import json
import sys
import time
from pathlib import Path

import numpy as np
from peft import PeftModel
from transformers import AutoTokenizer

from grpo_ext.evaluation.sampling import SamplingParams, sample
from grpo_ext.models import EMBEDDED_MODEL_DIR
from grpo_ext.tasks import get_task
from scripts.build_base_model import load_as_main_job

task = get_task("arithmetic", min_operands=2, max_operands=4, digits=2, operators="+-")
problems = task.load("validation", 1000)
tokenizer = AutoTokenizer.from_pretrained(EMBEDDED_MODEL_DIR)


def score(model):
    model.eval()
    out = sample(model, tokenizer, problems["prompt"], SamplingParams(n=16, temperature=0.7, seed=0, batch_size=64))
    right = [np.mean([task.is_correct(c, a) for c in cs]) for cs, a in zip(out, problems["answer"], strict=True)]
    return float(np.mean(right))


results = {}
for name in ["base", *sys.argv[1:]]:
    t = time.time()
    model = load_as_main_job(EMBEDDED_MODEL_DIR)
    if name != "base":
        model = PeftModel.from_pretrained(model, Path(name))
    results[name] = score(model)
    print(name, round(results[name], 4), f"{time.time() - t:.0f} s", flush=True)
Path(__file__).with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
