"""Sampling speed on a CUDA GPU: our sampler against transformers' `generate` (eager and static cache) and vLLM.

    python -m benchmarks.gpu_sampling [--reps 5] [--configs 8x16,32x16] [--max-new-tokens 128] [--shape 0.5b]
                                      [--decodes eager,static,compiled]

Without a CUDA device it prints why and writes nothing (exit 0), so a CPU run never overwrites the committed GPU
result; ``--device cpu`` rehearses every code path on the CPU (use ``--shape tiny``) and prints the table without
writing it (the tests do this); there the compiled step uses dynamo's ``eager`` backend (tracing and guards, no
code generation) unless ``--compile-backend`` says otherwise.

Model: a random-weight Qwen2 model of Qwen2.5-0.5B's shape with the real vocabulary (151,936), bf16, built here and
saved with the embedded character tokenizer (benchmarks/_gpu.py). Prompts: held-out problems of the embedded
arithmetic task (~10 tokens). Each configuration P x N is P prompts x N samples, T = 1, top-p 1, ``--max-new-tokens``
new tokens (random weights draw EOS with probability ~1/151,936 a token, so nearly every sample runs to the limit:
the same work on every side). Slots (rows decoding at once) = P x N on every side.

Sides:
- ours: `grpo_ext.sampler.sampling.sample` (the harness's transformers backend: continuous batching, shared
  prefill, per-sample random streams), `batch_size = P`, with the eager decode step (`decode="eager"`, today's);
- ours_static: the same with the fixed-shape decode step, not compiled (`decode="static"`);
- ours_compiled: the fixed-shape step through `torch.compile(mode="reduce-overhead")`, CUDA graphs
  (`decode="compiled"`, what `decode="auto"` picks on CUDA); its first call of a configuration compiles, as
  generate_static's does;
- generate: `model.generate(num_return_sequences=N, do_sample=True, top_k=0)`, dynamic cache (eager);
- generate_static: the same with `cache_implementation="static"`: on CUDA transformers compiles the decoding step
  (torch.compile), so the first call of a configuration compiles; that is why warm-ups are timed apart;
- vllm: vLLM's offline `LLM.generate`, one request per prompt with `SamplingParams(n=N)`, prompts as token ids, no
  detokenisation (only when vLLM is installed; in the same process, `--vllm-gpu-memory` of the GPU).

Timing: one warm-up call per method and configuration, timed and reported on its own (`warmup_seconds`); then
``--reps`` repetitions in which every method runs once, in rotating order (benchmarks/_common.alternate), each call
ended by `torch.cuda.synchronize()`. Reported: median wall seconds with quartiles, ms per decode step (median wall
time / max new tokens: the time of one step of all P x N slots, prefill amortised), samples/s, and each method's
time over ours and over generate_static (medians of the per-repetition ratios: the pairs ran in the same
repetition). The ``slots`` column is the decode batch: 128 at 8 x 16, 512 at 32 x 16. Texts are decoded on every
side (what the harness needs).

No target: this measures where our sampler stands against transformers' best on CUDA (issue 21).
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

from benchmarks import _common, _gpu

METHODS = ("ours", "ours_static", "ours_compiled", "generate", "generate_static", "vllm")
#: ours_<decode> rows: SamplingParams.decode of each (plain "ours" is the eager step)
DECODES = ("eager", "static", "compiled")
NAME = "gpu_sampling"


def parse_configs(text: str) -> list[tuple[int, int]]:
    """``"8x16,32x16"`` -> ``[(8, 16), (32, 16)]`` (prompts x samples)."""
    out = []
    for part in text.split(","):
        try:
            prompts, samples = (int(x) for x in part.strip().lower().split("x"))
        except ValueError:
            raise SystemExit(f"--configs: expected PROMPTSxSAMPLES[,...] like 8x16,32x16, got {part!r}") from None
        if prompts < 1 or samples < 1:
            raise SystemExit(f"--configs: prompts and samples must be >= 1, got {part!r}")
        out.append((prompts, samples))
    return out


def vllm_status() -> str:
    return "installed" if importlib.util.find_spec("vllm") is not None else "not installed"


# ---- the sides ---------------------------------------------------------------------------------------------------


def ours_name(decode: str) -> str:
    return "ours" if decode == "eager" else f"ours_{decode}"


def parse_decodes(text: str) -> list[str]:
    """``"eager,compiled"`` -> ``["eager", "compiled"]`` (our sampler's decode steps to time)."""
    decodes = [part.strip() for part in text.split(",") if part.strip()]
    if not decodes or any(d not in DECODES for d in decodes):
        raise SystemExit(f"--decodes: expected a comma-separated subset of {','.join(DECODES)}, got {text!r}")
    return decodes


def make_ours(
    model,
    tokenizer,
    prompts: list[str],
    n: int,
    max_new_tokens: int,
    decode: str = "eager",
    outputs: dict | None = None,
):
    """Our sampler with ``decode``; ``outputs[r]`` keeps repetition ``r``'s samples when given."""
    from grpo_ext.sampler.sampling import SamplingParams, sample

    def run(r: int) -> list[list[str]]:
        params = SamplingParams(
            n=n,
            temperature=1.0,
            top_p=1.0,
            max_new_tokens=max_new_tokens,
            seed=1000 + r,
            batch_size=len(prompts),
            decode=decode,
        )
        texts = sample(model, tokenizer, prompts, params, progress=False)
        if outputs is not None:
            outputs[r] = texts
        return texts

    return run


def make_generate(model, tokenizer, prompts: list[str], n: int, max_new_tokens: int, static: bool, lengths: list):
    import torch

    from grpo_ext.sampler.sampling import encode_prompts

    device = next(model.parameters()).device
    enc = encode_prompts(tokenizer, prompts, device)
    kwargs = dict(
        max_new_tokens=max_new_tokens,
        num_return_sequences=n,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    if static:
        kwargs["cache_implementation"] = "static"

    def run(r: int) -> list[str]:
        torch.manual_seed(1000 + r)
        with torch.no_grad():
            out = model.generate(**enc, **kwargs)
        new = out[:, enc["input_ids"].shape[1] :]
        lengths.append(float((new != tokenizer.pad_token_id).sum(-1).float().mean()))
        return tokenizer.batch_decode(new, skip_special_tokens=True)

    return run


def load_vllm(folder: Path, gpu_memory: float):
    """vLLM's offline engine on the same folder (its own copy of the weights, `gpu_memory` of the GPU), built once."""
    import vllm

    return vllm.LLM(model=str(folder), dtype="bfloat16", seed=0, gpu_memory_utilization=gpu_memory)


def make_vllm(llm, prompt_ids: list[list[int]], n: int, max_new_tokens: int):
    import vllm

    requests = [{"prompt_token_ids": ids} for ids in prompt_ids]

    def run(r: int):
        params = vllm.SamplingParams(
            n=n, temperature=1.0, top_p=1.0, max_tokens=max_new_tokens, seed=1000 + r, detokenize=False
        )
        return llm.generate(requests, params, use_tqdm=False)

    return run


# ---- one configuration -----------------------------------------------------------------------------------------


def measure(sides: dict, device, reps: int) -> tuple[dict, dict, dict]:
    """Warm-up (timed apart) then alternated repetitions; returns (warm-up seconds, times, errors) per side. A side
    that raises (e.g. a compiler missing on the machine) is recorded with its error and left out; the others go on."""
    errors: dict[str, str] = {}

    def timed(name: str, fn):
        def call(r: int):
            if name in errors:
                return
            try:
                fn(r)
                _gpu.synchronize(device)
            except Exception as err:
                errors[name] = f"{type(err).__name__}: {err}"
                print(f"  {name} failed: {errors[name]}", file=sys.stderr, flush=True)

        return call

    calls = {name: timed(name, fn) for name, fn in sides.items()}
    warmup = {}
    for name, call in calls.items():
        _gpu.synchronize(device)
        start = time.perf_counter()
        call(-1)
        warmup[name] = time.perf_counter() - start
        print(f"  warm-up {name}: {warmup[name]:.3g} s", file=sys.stderr, flush=True)
    times = _common.alternate(calls, reps=reps, warmup=0)
    ok = [name for name in times if name not in errors]
    return {k: warmup[k] for k in ok}, {k: times[k] for k in ok}, errors


def agreement(outputs: dict[str, dict], name: str) -> float | None:
    """Share of samples that ``name`` drew identical to the eager step's, at the same seeds (same repetitions).

    The decode step changes no sample in exact arithmetic; in bf16 on a GPU the kernels' rounding differs between a
    step over the columns in use and one over the whole cache (as between batch sizes), which can flip a draw."""
    eager, other = outputs.get("eager", {}), outputs.get(name, {})
    pairs = [
        (a, b)
        for r in eager.keys() & other.keys()
        for x, y in zip(eager[r], other[r], strict=True)
        for a, b in zip(x, y, strict=True)
    ]
    return sum(a == b for a, b in pairs) / len(pairs) if pairs else None


def run_config(model, tokenizer, folder, problems, prompts_n: int, n: int, args, device, llm_cache: dict) -> dict:
    from grpo_ext.sampler.sampling import encode_prompt_ids

    prompts = list(problems[:prompts_n])
    lengths: dict[str, list[float]] = {"generate": [], "generate_static": []}
    outputs: dict[str, dict] = {d: {} for d in args.decodes}
    sides = {
        **{
            ours_name(d): make_ours(model, tokenizer, prompts, n, args.max_new_tokens, d, outputs[d])
            for d in args.decodes
        },
        "generate": make_generate(model, tokenizer, prompts, n, args.max_new_tokens, False, lengths["generate"]),
        "generate_static": make_generate(
            model, tokenizer, prompts, n, args.max_new_tokens, True, lengths["generate_static"]
        ),
    }
    vllm = vllm_status() if not args.no_vllm else "disabled (--no-vllm)"
    if vllm == "installed" and device.type == "cuda":
        try:
            if "llm" not in llm_cache:
                llm_cache["llm"] = load_vllm(folder, args.vllm_gpu_memory)
            sides["vllm"] = make_vllm(llm_cache["llm"], encode_prompt_ids(tokenizer, prompts), n, args.max_new_tokens)
        except Exception as err:  # vLLM cannot be tested here (no GPU): record why, keep the other results
            vllm = f"failed: {type(err).__name__}: {err}"
    warmup, times, errors = measure(sides, device, args.reps)
    summaries = {name: _common.summary(t) for name, t in times.items()}
    ours, static_generate = times.get("ours"), times.get("generate_static")
    ratios = {name: _common.paired_ratio(t, ours) for name, t in times.items() if name != "ours" and ours is not None}
    over_static = {
        name: _common.paired_ratio(t, static_generate)
        for name, t in times.items()
        if name != "generate_static" and static_generate is not None
    }
    return {
        "prompts": prompts_n,
        "samples_per_prompt": n,
        "slots": prompts_n * n,
        "warmup_seconds": warmup,
        "seconds": summaries,
        "ms_per_decode_step": {name: s["median"] / args.max_new_tokens * 1e3 for name, s in summaries.items()},
        "samples_per_second": {name: prompts_n * n / s["median"] for name, s in summaries.items()},
        "time_over_ours": ratios,
        "time_over_generate_static": over_static,
        "same_samples_as_ours": {ours_name(d): agreement(outputs, d) for d in args.decodes if d != "eager"},
        "generate_mean_new_tokens": {k: _common.median(v) for k, v in lengths.items() if v},
        "vllm": vllm,
        "errors": errors,
    }


# ---- driver ------------------------------------------------------------------------------------------------------


def _ratio_cell(ratio: dict | None) -> str:
    return "" if ratio is None else f"{ratio['median_of_ratios']:.3f}x ({ratio['q1']:.3f}-{ratio['q3']:.3f})"


def table(results: list[dict]) -> str:
    rows = []
    for res in results:
        for name in METHODS:
            if name in res["errors"]:
                rows.append([f"{res['prompts']} x {res['samples_per_prompt']}", res["slots"], name,
                             f"failed: {res['errors'][name][:200]}", "", "", "", "", ""])  # fmt: skip
                continue
            if name not in res["seconds"]:
                continue
            s = res["seconds"][name]
            ratio = res["time_over_ours"].get(name)
            over_static = res.get("time_over_generate_static", {}).get(name)
            rows.append(
                [
                    f"{res['prompts']} x {res['samples_per_prompt']}",
                    res["slots"],
                    name,
                    f"{res['warmup_seconds'][name]:.3g}",
                    f"{s['median']:.3g} ({s['q1']:.3g}-{s['q3']:.3g})",
                    f"{res['ms_per_decode_step'][name]:.3g}",
                    f"{res['samples_per_second'][name]:.4g}",
                    "1" if name == "ours" else _ratio_cell(ratio),
                    "1" if name == "generate_static" else _ratio_cell(over_static),
                ]
            )
    headers = ["prompts x samples", "slots", "method", "warm-up s", "median s (IQR)", "ms / decode step",
               "samples/s", "time / ours (IQR)", "time / generate_static (IQR)"]  # fmt: skip
    return _common.markdown_table(headers, rows)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--configs", default="8x16,32x16", help="prompts x samples, comma-separated")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--shape", default="0.5b", choices=sorted(_gpu.SHAPES))
    parser.add_argument("--no-vllm", action="store_true", help="leave vLLM out even when it is installed")
    parser.add_argument(
        "--decodes", default=",".join(DECODES), help="our sampler's decode steps to time (eager,static,compiled)"
    )
    parser.add_argument(
        "--compile-backend",
        default=None,
        help="torch.compile backend of ours_compiled (default: inductor with CUDA graphs on CUDA, eager on the CPU)",
    )
    parser.add_argument("--vllm-gpu-memory", type=float, default=0.3, help="vLLM's gpu_memory_utilization")
    parser.add_argument(
        "--device", default="cuda", choices=("cuda", "cpu"), help="cpu: rehearse on the CPU, print, write nothing"
    )
    args = parser.parse_args(argv)
    configs = parse_configs(args.configs)
    args.decodes = parse_decodes(args.decodes)
    if args.device == "cuda":
        reason = _gpu.cuda_unavailable_reason()
        if reason is not None:
            print(f"{NAME}: needs a CUDA GPU: {reason}. Nothing measured, nothing written.")
            return {"skipped": reason}

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_ext.sampler import static_step
    from grpo_ext.tasks import get_task

    device = torch.device(args.device)
    problems = get_task("arithmetic").load("test", max(p for p, _ in configs))["prompt"]
    workdir = Path(tempfile.mkdtemp(prefix="grpo_ext_gpu_sampling_"))
    try:
        folder = _gpu.build_random_model(args.shape, workdir / f"qwen2.5-{args.shape}-random", device=args.device)
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval()
        tokenizer = AutoTokenizer.from_pretrained(folder)
        results, llm_cache = [], {}
        backend = args.compile_backend or ("inductor" if device.type == "cuda" else "eager")
        options = static_step.COMPILE_OPTIONS | {"backend": backend}
        if backend != "inductor":  # the mode is an inductor option
            options.pop("mode", None)
        with mock.patch.dict(static_step.COMPILE_OPTIONS, options, clear=True):
            for prompts_n, n in configs:
                print(f"{prompts_n} prompts x {n} samples:", file=sys.stderr, flush=True)
                results.append(run_config(model, tokenizer, folder, problems, prompts_n, n, args, device, llm_cache))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    text = table(results)
    payload = {
        "device": _gpu.device_facts(device),
        "params": vars(args) | {"configs": configs, "model": f"random-weight Qwen2.5-{args.shape} shape",
                                "vocab_size": _gpu.SHAPES[args.shape]["vocab_size"], "dtype": str(dtype),
                                "compile_options": options},
        "results": results,
    }  # fmt: skip
    if device.type != "cuda":
        print(text)
        print(f"\n{NAME}: CPU rehearsal, not written (GPU results only)")
        return payload
    _common.write_results(NAME, payload, text)
    return payload


if __name__ == "__main__":
    main()
