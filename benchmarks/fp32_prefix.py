"""A float32 model's sampling on a CPU with the shared prompt prefix (prefilled once, attended to by the CPU decode
attention) against sdpa on whole prompts, side by side.

    OMP_NUM_THREADS=1 python -m benchmarks.fp32_prefix [--model smollm2-135m-instruct] [--problems 32] [--n 4,16]

The real-model study's stage (`word_arithmetic`, 2 operands of 2 digits, zero-shot, additions and subtractions
balanced: ~108 prompt tokens, 75 of them SmolLM2's chat template that every prompt shares), test problems, T 0.7, at
most 64 new tokens, the task's stop string, 16 prompts a batch, one thread, the model in float32 (what the study runs
on a CPU without native bf16). Two sides, the same sampler otherwise:

- **sdpa**: the rule before (`uses_decode_attention` true for bf16 / fp16 models only): a float32 model attends
  with transformers' sdpa and prefills every prompt whole.
- **prefix**: the rule now (float32 too): the shared prefix is prefilled once and kept apart from the slots, each
  decode step attends to it once for all rows (`grpo_ext/sampler/decode_attention.py`).

Timing: `benchmarks/_common.alternate` (sides in rotating order, after one untimed warm-up each), `--reps`
repetitions on the same problems; samples per CPU second of this process (one thread) decide, wall seconds beside.
The samples of the two sides are compared one by one (float32 either way: equal but for float rounding at a draw's
edge). Prints the table and writes ``benchmarks/results/fp32_prefix.json``.
"""

from __future__ import annotations

import argparse

from benchmarks import _common

TASK_KWARGS = {"min_operands": 2, "max_operands": 2, "digits": 2, "num_fewshot": 0, "balance_operations": True}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--model", default="smollm2-135m-instruct", help="a model name or folder (float32 on a CPU)")
    parser.add_argument("--problems", type=int, default=32)
    parser.add_argument("--n", default="4,16", help="samples a problem, comma-separated")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--out-name", default="fp32_prefix", help="results file name (benchmarks/results/<name>.json)")
    args = parser.parse_args(argv)
    _common.set_threads(1)

    import torch

    from grpo_ext.evaluation.backends import load_model_and_tokenizer
    from grpo_ext.sampler import decoder
    from grpo_ext.sampler.decode_attention import uses_decode_attention
    from grpo_ext.sampler.sampling import SamplingParams, encode_prompt_ids, sample
    from grpo_ext.sampler.slot_cache import shared_prefix_length
    from grpo_ext.tasks import get_task

    model, tokenizer = load_model_and_tokenizer(args.model, device="cpu", dtype=torch.float32)
    task = get_task("word_arithmetic", **TASK_KWARGS)
    prompts = list(task.load("test", args.problems)["prompt"])
    ids = encode_prompt_ids(tokenizer, prompts)
    lengths = {"prompt_tokens_mean": sum(map(len, ids)) / len(ids), "shared_prefix": shared_prefix_length(ids)}

    def before_rule(m) -> bool:  # bf16 / fp16 only: what a float32 model did before
        return uses_decode_attention(m) and next(m.parameters()).dtype != torch.float32

    rules = {"sdpa": before_rule, "prefix": uses_decode_attention}
    shared: dict[str, int] = {}  # the prefix each side prefilled once (the decoder looks for one only with the rule on)
    find_prefix = decoder.shared_prefix_length
    results, rows = [], []
    for n in [int(x) for x in args.n.split(",")]:
        params = SamplingParams(n=n, temperature=0.7, max_new_tokens=64, seed=0, batch_size=16, stop=("Question:",))
        outputs: dict = {}

        def side(name: str, params=params, outputs=outputs):
            def run(r: int) -> None:
                shared[name] = 0

                def found(prompt_ids) -> int:
                    shared[name] = find_prefix(prompt_ids)
                    return shared[name]

                decoder.uses_decode_attention, decoder.shared_prefix_length = rules[name], found
                try:
                    outputs[name] = sample(model, tokenizer, prompts, params, progress=False)
                finally:
                    decoder.uses_decode_attention, decoder.shared_prefix_length = uses_decode_attention, find_prefix

            return run

        cpu: dict[str, list[float]] = {}
        wall = _common.alternate({name: side(name) for name in rules}, reps=args.reps, warmup=1, cpu_times=cpu)
        samples = args.problems * n
        pairs = [
            (a, b) for x, y in zip(outputs["sdpa"], outputs["prefix"], strict=True) for a, b in zip(x, y, strict=True)
        ]
        result = {
            "n": n,
            "samples": samples,
            "same_samples": sum(a == b for a, b in pairs),
            "shared_prefix_tokens": dict(shared),
            "cpu_seconds": {k: _common.summary(v) for k, v in cpu.items()},
            "wall_seconds": {k: _common.summary(v) for k, v in wall.items()},
            "samples_per_cpu_second": {k: samples / _common.median(v) for k, v in cpu.items()},
            "speedup": _common.paired_ratio(cpu["sdpa"], cpu["prefix"]),
        }
        results.append(result)
        rate, up = result["samples_per_cpu_second"], result["speedup"]
        rows.append([n, f"{rate['sdpa']:.2f}", f"{rate['prefix']:.2f}",
                     f"{up['median_of_ratios']:.2f}x ({up['q1']:.2f}-{up['q3']:.2f})",
                     f"{result['same_samples']} / {samples}"])  # fmt: skip
    table = _common.markdown_table(
        ["n", "sdpa samples / CPU s", "prefix samples / CPU s", "prefix over sdpa (IQR)", "same samples"], rows
    )
    payload = {"params": vars(args), "prompts": lengths, "results": results}
    _common.write_results(args.out_name, payload, table)
    return payload


if __name__ == "__main__":
    main()
