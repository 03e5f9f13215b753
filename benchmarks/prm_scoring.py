"""Process-reward-model scoring time per GRPO step, as a share of the step, on the embedded task (CPU, one thread);
and the step-end token mapping of `grpo_ext.reasoning_steps` on a long non-canonical BPE completion (issue 19).

    python -m benchmarks.prm_scoring [--reps 10] [--warmup 2] [--batch 64] [--mapping-reps 5]

Part 1. One PRM per format (`token_classification`, `step_tag`, `qwen_prm`), random weights, built here in the
first design's policy shape (hidden 128, 4 layers, 4 heads; ~1 M parameters; the shipped base is now 133 k, so the
PRM is ~7.5x the policy until this benchmark is re-run in its shape), with a character tokenizer that holds the
format's tags. Each scores a `GRPOExtTrainer` in process mode
(`process_reward_funcs=[prm]`, loaded by `load_process_reward_model` as the trainer loads `process_reward_model`)
with configs/default.yaml's GRPO settings (64 samples a step = 8 prompts x 8 generations, 48 completion tokens).
A step is `training_step` + optimizer step (as in benchmarks/overhead.py); the PRM's own time is measured inside
the step by a wrapper around the callable. Reported per format: PRM ms per step, step ms, PRM time / step time
(median of per-step ratios, IQR). The three trainers alternate, with the same weights and seed per repetition.

Part 2. The step-end mapping's character ends on completions of 816 and 3264 tokens of a byte-level BPE tokenizer
(trained here on the test fixtures' GSM8K/MATH text, as no hub tokenizer is reachable offline) whose tokenization
differs from the canonical one in a few places (merged tokens split into characters, as sampling can produce):
incremental decoding (linear) against decoding every prefix (quadratic, the implementation before), results checked
equal.

No target: the ratios describe what a PRM costs; part 2 reports the speed-up.
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
import time
from pathlib import Path

from transformers import set_seed

from benchmarks import _common
from benchmarks.overhead import base_settings, make_batches, one_step
from grpo_ext.rewards.prm import PRM_FORMATS
from grpo_ext.stand_ins import build_prm

FORMATS = tuple(PRM_FORMATS)  # every registered format (build_prm makes a random-weight folder of each)
# ---- PRMs in each format, built locally --------------------------------------------------------------------------


class TimedPRM:
    """The PRM callable, adding its wall time to `seconds` (read and reset around each GRPO step)."""

    def __init__(self, prm):
        self.prm, self.__name__, self.seconds = prm, prm.__name__, 0.0

    def __call__(self, **kwargs):
        start = time.perf_counter()
        try:
            return self.prm(**kwargs)
        finally:
            self.seconds += time.perf_counter() - start


def build_trainers(model: str, batch: int | None, root: Path):
    from grpo_ext.config import GRPOExtConfig
    from grpo_ext.rewards.prm import load_process_reward_model
    from grpo_ext.tasks import get_task
    from grpo_ext.trainer import GRPOExtTrainer

    settings, task_kwargs = base_settings(batch)
    task = get_task("arithmetic", **task_kwargs)
    dataset = task.load("train", 2048)
    trainers, timers, params = {}, {}, {}
    for fmt in FORMATS:
        prm = load_process_reward_model(
            build_prm(fmt, root / fmt), fmt, step_separator=task.step_separator, batch_size=64
        )
        params[fmt] = sum(p.numel() for p in prm.model.parameters())
        timers[fmt] = TimedPRM(prm)
        set_seed(settings["seed"])
        args = GRPOExtConfig(
            output_dir=str(root / f"out_{fmt}"),
            advantage_mode="process",
            step_separator=task.step_separator,
            **settings,
        )
        trainer = GRPOExtTrainer(
            model=model,
            reward_funcs=[task.outcome_reward],
            args=args,
            train_dataset=dataset,
            process_reward_funcs=[timers[fmt]],
        )
        trainer.current_gradient_accumulation_steps = args.gradient_accumulation_steps
        trainer.create_optimizer_and_scheduler(num_training_steps=args.max_steps)
        trainer.model.train()
        trainers[fmt] = trainer
    return trainers, timers, params, dataset, settings


# ---- part 2: the step-end mapping --------------------------------------------------------------------------------


def bpe_tokenizer(vocab_size: int = 2000):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    fixtures = _common.ROOT / "tests" / "fixtures"
    rows = [
        json.loads(line)
        for name in ("gsm8k_sample.jsonl", "math_sample.jsonl")
        for line in (fixtures / name).read_text().splitlines()
    ]
    texts = [" ".join(str(v) for v in row.values()) for row in rows]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        texts * 4, trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    )
    tok.add_special_tokens(["<eos>"])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>"), texts


def long_noncanonical_completion(tokenizer, texts: list[str], length: int = 816, every: int = 40) -> list[int]:
    """`length` tokens of solution text, every `every`-th multi-character token split into its characters."""
    solutions = "\n".join(t for _ in range(1 + length // 100) for t in texts)
    canonical = tokenizer(solutions, add_special_tokens=False)["input_ids"]
    ids: list[int] = []
    for i, token in enumerate(canonical):
        piece = tokenizer.decode([token])
        if i % every == every - 1 and len(piece) > 1:
            ids += [t for ch in piece for t in tokenizer(ch, add_special_tokens=False)["input_ids"]]
        else:
            ids.append(token)
        if len(ids) >= length:
            return ids[:length]
    raise ValueError("not enough text for the completion")


def mapping_benchmark(reps: int, lengths: tuple[int, ...] = (816, 3264)) -> dict:
    """Prefix decoding vs incremental decoding on completions of each length (x4 in length: x16 vs x4 in time)."""
    from grpo_ext import reasoning_steps

    tokenizer, texts = bpe_tokenizer()
    out = {"vocab_size": len(tokenizer), "lengths": {}}
    for length in lengths:
        ids = long_noncanonical_completion(tokenizer, texts, length)
        assert tokenizer(tokenizer.decode(ids), add_special_tokens=False)["input_ids"] != ids  # really non-canonical
        fns = {
            "prefix_decoding": lambda _r, ids=ids: reasoning_steps.char_ends_by_prefix_decoding(tokenizer, ids),
            "incremental": lambda _r, ids=ids: reasoning_steps.char_ends_by_incremental_decoding(tokenizer, ids),
        }
        equal = fns["prefix_decoding"](0) == fns["incremental"](0)
        times = _common.alternate(fns, reps=reps, warmup=1)
        out["lengths"][length] = {
            "steps": len(reasoning_steps.step_end_token_indices(tokenizer, ids, "newline")),
            "equal_char_ends": equal,
            "seconds": {k: _common.summary(v) for k, v in times.items()},
            "speedup": _common.paired_ratio(times["prefix_decoding"], times["incremental"]),
        }
    return out


# ---- main --------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch", type=int, default=None, help="samples a step (default: configs/default.yaml's)")
    parser.add_argument("--model", default=None, help="policy folder (default: the embedded model)")
    parser.add_argument("--mapping-reps", type=int, default=5)
    args = parser.parse_args(argv)
    _common.set_threads(1)
    model = args.model or _common.model_dir()
    load_start = _common.load_average()

    with tempfile.TemporaryDirectory(prefix="grpo_ext_prm_bench_") as tmp:
        trainers, timers, params, dataset, settings = build_trainers(model, args.batch, Path(tmp))
        batches = make_batches(dataset, settings, args.warmup + args.reps)
        snapshots = {n: copy.deepcopy(t.model.state_dict()) for n, t in trainers.items()}
        prm_seconds: dict[str, list[float]] = {n: [] for n in trainers}

        def before(name: str, r: int) -> None:
            trainers[name].model.load_state_dict(snapshots[name])
            set_seed(1000 + r + args.warmup)
            timers[name].seconds = 0.0

        def runner(name: str):
            def fn(r: int) -> None:
                one_step(trainers[name], batches[r + args.warmup])
                if r >= 0:
                    prm_seconds[name].append(timers[name].seconds)

            return fn

        times = _common.alternate({n: runner(n) for n in trainers}, reps=args.reps, warmup=args.warmup, before=before)
    mapping = mapping_benchmark(args.mapping_reps)

    shares = {n: _common.paired_ratio(prm_seconds[n], times[n]) for n in trainers}
    rows = []
    for n in trainers:
        s, p = _common.summary(times[n]), _common.summary(prm_seconds[n])
        rows.append(
            [
                f"{n} ({params[n] / 1e6:.2f} M parameters)",
                f"{p['median'] * 1e3:.0f} ms",
                f"{s['median'] * 1e3:.0f} ms",
                f"{shares[n]['median_of_ratios']:.3f} (IQR {shares[n]['q1']:.3f}-{shares[n]['q3']:.3f})",
            ]
        )
    table = _common.markdown_table(
        [
            f"PRM format (median of {args.reps} alternated steps)",
            "PRM scoring per step",
            "GRPO step",
            "PRM time / step time",
        ],
        rows,
    )
    table += (
        f"\n\n{settings['per_device_train_batch_size']} samples a step, max {settings['max_completion_length']} "
        f"completion tokens, embedded policy, 1 thread; load average {' / '.join(map(str, _common.load_average()))}."
    )
    mapping_rows = []
    for length, m in mapping["lengths"].items():
        ms = {k: v["median"] * 1e3 for k, v in m["seconds"].items()}
        mapping_rows.append(
            [
                f"{length} tokens, {m['steps']} steps",
                f"{ms['prefix_decoding']:.1f} ms",
                f"{ms['incremental']:.1f} ms",
                f"{m['speedup']['median_of_ratios']:.1f}x",
                "yes" if m["equal_char_ends"] else "NO",
            ]
        )
    table += "\n\n" + _common.markdown_table(
        [
            f"step-end mapping, non-canonical byte-level BPE completion ({mapping['vocab_size']} tokens vocabulary)",
            "decode every prefix (before)",
            "incremental decoding",
            "speed-up",
            "same character ends",
        ],
        mapping_rows,
    )
    payload = {
        "params": vars(args) | {"model": model, "settings": settings, "prm_parameters": params},
        "load_average_start": load_start,
        "step_seconds": {n: _common.summary(t) for n, t in times.items()},
        "prm_seconds": {n: _common.summary(t) for n, t in prm_seconds.items()},
        "prm_share_of_step": shares,
        "step_end_mapping": mapping,
    }
    _common.write_results("prm_scoring", payload, table)
    return payload


def summary_rows() -> list[list]:
    """This benchmark's rows of the `run_all` summary (:func:`benchmarks._common.dated_rows`)."""

    def rows(r):
        shares = " / ".join(f"{v['median_of_ratios']:.2f}x" for v in r["prm_share_of_step"].values())
        yield f"PRM time / GRPO step time ({', '.join(r['prm_share_of_step'])})", shares, "(info)", ""

    return _common.dated_rows(_common.load_result("prm_scoring"), rows)


if __name__ == "__main__":
    main()
