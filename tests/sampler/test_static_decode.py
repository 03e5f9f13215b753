"""The fixed-shape decode step (grpo_ext.sampler.static_step): the same samples as the eager step over a grid of
settings, greedy equal to ``generate``, a compiled step (``torch.compile`` with the eager backend on the CPU) that
gives the same samples without compiling per step, and the small pure pieces (buckets, mode choice)."""

import logging

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from grpo_ext.model_paths import resolve_model_path
from grpo_ext.sampler import slot_cache, static_step
from grpo_ext.sampler.continuous import continuous_sample
from grpo_ext.sampler.decoder import Decoder
from grpo_ext.sampler.sampling import SamplingParams, derive_seed, encode_prompt_ids, sample
from grpo_ext.sampler.static_step import bucket, can_compile, resolve_decode, static_shrink_plan
from grpo_ext.tasks import get_task


@pytest.fixture(scope="module")
def embedded():
    """The shipped model: samples end with EOS after 5-40 tokens, so slots free up at different times."""
    path = resolve_model_path("embedded")
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval(), AutoTokenizer.from_pretrained(path)


@pytest.fixture(scope="module")
def random_model(tiny_char_llama):
    """A random 2-layer Llama with grouped-query attention over 20 tokens: its samples rarely coincide."""
    return tiny_char_llama()


class Events:
    """What the decoder did during a run: shrinks (slots before, after), compactions, forks that waited for a slot,
    rows placed into slots."""

    def __init__(self, monkeypatch):
        self.shrinks, self.compactions, self.waited, self.placed = [], 0, 0, 0
        shrink, compact, fork = Decoder.shrink, slot_cache.SlotCache.compact, Decoder.fork
        place = slot_cache.SlotCache.place

        def on_shrink(decoder, keep):
            self.shrinks.append((len(decoder.rows), len(keep)))
            return shrink(decoder, keep)

        def on_compact(cache, *args, **kwargs):
            self.compactions += 1
            return compact(cache, *args, **kwargs)

        def on_fork(decoder, source, row):
            self.waited += all(r is not None for r in decoder.rows)
            return fork(decoder, source, row)

        def on_place(cache, slots, kv):
            self.placed += len(slots)
            return place(cache, slots, kv)

        monkeypatch.setattr(slot_cache.SlotCache, "place", on_place)
        monkeypatch.setattr(Decoder, "shrink", on_shrink)
        monkeypatch.setattr(slot_cache.SlotCache, "compact", on_compact)
        monkeypatch.setattr(Decoder, "fork", on_fork)


def _run(model, tok, prompts, *, n, temperature, top_p, max_new_tokens, slots, decode, eos=True, **kwargs):
    prompt_ids = encode_prompt_ids(tok, prompts)
    seeds = [[derive_seed(5, j, i) for i in range(n)] for j in range(len(prompts))]
    with torch.no_grad():
        stream = continuous_sample(
            model,
            prompt_ids,
            seeds,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            slots=slots,
            prefill_batch=2,
            eos_ids=[tok.eos_token_id] if eos else [],
            pad_id=tok.pad_token_id,
            decode=decode,
            **kwargs,
        )
        return dict(stream)


def _prompts(count: int) -> list[str]:
    return list(get_task("arithmetic").load("test", count)["prompt"]) + ["5=", "12+34-56+78-90+1="]  # short, long


# n, temperature, top_p, max_new_tokens, slots: forks that wait (2 and 3 slots, 3 not a power of two), compactions
# (long samples in a short cache), shrinks to buckets (64 slots), one new token (every sample ends at its prefill)
GRID = [
    (4, 1.0, 1.0, 40, 2),
    (4, 2.0, 1.0, 60, 3),
    (3, 0.7, 0.9, 40, 5),
    (1, 0.0, 1.0, 40, 3),
    (6, 1.3, 0.95, 50, 64),
    (4, 1.0, 1.0, 1, 4),
]


@pytest.mark.parametrize("n, temperature, top_p, max_new_tokens, slots", GRID)
def test_static_step_gives_the_eager_samples(embedded, monkeypatch, n, temperature, top_p, max_new_tokens, slots):
    model, tok = embedded
    prompts = _prompts(5)
    settings = dict(n=n, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, slots=slots)
    eager = _run(model, tok, prompts, decode="eager", **settings)
    events = Events(monkeypatch)
    static = _run(model, tok, prompts, decode="static", **settings)
    assert static == eager and sorted(static) == list(range(len(prompts)))
    samples = [s for j in static for s in static[j]]
    assert all(len(s) == 1 for s in samples) if max_new_tokens == 1 else len({len(s) for s in samples}) > 1
    if max_new_tokens > 1:
        assert any(s[-1] == tok.eos_token_id and len(s) < max_new_tokens for s in samples)  # EOS ends rows early
    if temperature > 0 and slots <= 3 and max_new_tokens > 1:
        assert events.waited and events.compactions  # forks waited for a slot; the windows moved back
    for before, after in events.shrinks:  # only to power-of-two buckets, at least halving
        assert after & (after - 1) == 0 and after <= before // 2
    if slots == 64:
        assert events.shrinks


def test_static_step_on_a_model_that_never_stops(random_model, monkeypatch):
    """No EOS: every sample runs to the limit, nearly each on its own row: 9 rows take turns in 4 slots."""
    model, tok = random_model
    settings = dict(n=3, temperature=1.0, top_p=1.0, max_new_tokens=24, slots=4, eos=False)
    eager = _run(model, tok, ["1+2=", "37+45-18=", "9="], decode="eager", **settings)
    events = Events(monkeypatch)
    assert _run(model, tok, ["1+2=", "37+45-18=", "9="], decode="static", **settings) == eager
    assert all(len(s) == 24 for j in eager for s in eager[j]) and events.placed > 4 and events.compactions


def test_static_greedy_equals_generate_and_sample_modes_agree(embedded):
    model, tok = embedded
    prompts = list(get_task("arithmetic").load("test", 6)["prompt"])
    greedy = SamplingParams(n=1, temperature=0, max_new_tokens=40, batch_size=3, decode="static")
    for prompt, (completion,) in zip(prompts, sample(model, tok, prompts, greedy, progress=False), strict=True):
        ids = tok(prompt, return_tensors="pt")
        out = model.generate(**ids, max_new_tokens=40, do_sample=False, pad_token_id=tok.pad_token_id)
        assert tok.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True) == completion
    hot = SamplingParams(n=4, temperature=1.0, max_new_tokens=30, batch_size=2, seed=3)
    texts = {mode: sample(model, tok, prompts, hot.replace(decode=mode), progress=False) for mode in ("auto", "static")}
    assert texts["auto"] == texts["static"]  # auto is the eager step on the CPU


def test_compiled_step_gives_the_same_samples_and_compiles_a_bounded_number_of_times(
    embedded, random_model, monkeypatch
):
    """torch.compile with the eager backend (dynamo's tracing and guards, no code generation: CPU-fast): the same
    samples as the eager step, and a handful of graphs for many steps, two calls and several slot buckets."""
    from torch._dynamo.utils import counters

    model, tok = embedded
    torch._dynamo.reset()
    steps = []
    step = Decoder.step

    def counted(decoder):
        steps.append(len(decoder.rows))
        return (yield from step(decoder))

    monkeypatch.setattr(Decoder, "step", counted)
    settings = dict(n=4, temperature=1.5, top_p=1.0, max_new_tokens=50, slots=8)
    graphs = counters["stats"]["unique_graphs"]
    for prompts in (_prompts(5), _prompts(9)[5:]):  # a second call: other prompts, another cache capacity
        compiled = _run(model, tok, prompts, decode="compiled", compile_options={"backend": "eager"}, **settings)
        assert compiled == _run(model, tok, prompts, decode="eager", **settings)
    compiled_steps = len(steps) // 2  # as many eager steps ran
    assert compiled_steps >= 30 and len(set(steps)) >= 3  # the slot count changed (8 -> 4 -> 2)
    # the first shapes, then the slot dimension made dynamic: no compilation per step, per call or per bucket
    assert 1 <= counters["stats"]["unique_graphs"] - graphs <= 3
    assert counters["graph_break"] == {} or sum(counters["graph_break"].values()) == 0
    # another model through the same compiled step gets its own graphs, not the first model's
    other, other_tok = random_model
    settings |= {"eos": False, "max_new_tokens": 12}
    compiled = _run(
        other, other_tok, ["1+2=", "3="], decode="compiled", compile_options={"backend": "eager"}, **settings
    )
    assert compiled == _run(other, other_tok, ["1+2=", "3="], decode="eager", **settings)


def test_a_failing_compiler_falls_back_to_the_static_step(embedded, caplog):
    model, tok = embedded

    def broken_backend(graph, example_inputs):
        raise RuntimeError("no compiler here")

    settings = dict(n=2, temperature=1.0, top_p=1.0, max_new_tokens=20, slots=4)
    with caplog.at_level(logging.WARNING, logger="grpo_ext.sampler.decoder"):
        got = _run(model, tok, _prompts(3), decode="compiled", compile_options={"backend": broken_backend}, **settings)
    assert got == _run(model, tok, _prompts(3), decode="eager", **settings)
    assert "compiled decode step failed" in caplog.text and "no compiler here" in caplog.text


# ---- pure pieces -------------------------------------------------------------------------------------------------


def test_buckets_and_shrink_plans():
    assert [bucket(c, 512) for c in (1, 2, 3, 5, 8, 9, 129, 256)] == [2, 2, 4, 8, 8, 16, 256, 256]
    assert bucket(200, 300) == 256 and bucket(290, 300) == 300 and bucket(1, 1) == 1  # never above the call's
    assert static_shrink_plan([0, 5, 6], 16, 16) == [0, 1, 5, 6]  # 3 live -> bucket 4: one free slot kept
    assert static_shrink_plan(list(range(9)), 16, 16) is None  # bucket 16 is not a shrink
    assert static_shrink_plan([3], 4, 16) == [0, 3]  # bucket 2 of 4 slots: a half
    assert static_shrink_plan([0, 2, 3], 4, 16) is None and static_shrink_plan([1], 2, 16) is None  # never below 2
    assert static_shrink_plan([3, 1], 8, 8) == [1, 3] and static_shrink_plan([], 8, 8) is None


class _Param:
    def __init__(self, device):
        self.device = torch.device(device)


class _Model:
    def __init__(self, device, quantizer=None):
        self.device_name, self.hf_quantizer = device, quantizer

    def parameters(self):
        return iter([_Param(self.device_name)])


def test_decode_modes_resolve_and_stay_out_of_the_cache_key():
    class Bnb8BitHfQuantizer:
        is_compileable = False

    class Bnb4BitHfQuantizer(Bnb8BitHfQuantizer):  # transformers' name; measured to compile on an H100
        pass

    assert can_compile(_Model("cuda")) is None and resolve_decode("auto", _Model("cuda")) == "compiled"
    assert "cpu" in can_compile(_Model("cpu")) and resolve_decode("auto", _Model("cpu")) == "eager"
    eight, four = _Model("cuda", Bnb8BitHfQuantizer()), _Model("cuda", Bnb4BitHfQuantizer())
    assert "Bnb8Bit" in can_compile(eight) and resolve_decode("auto", eight) == "eager"
    assert can_compile(four) is None and resolve_decode("auto", four) == "compiled"
    assert "cpu" in can_compile(_Model("cpu", Bnb4BitHfQuantizer()))
    assert resolve_decode("static", _Model("cpu")) == "static"
    with pytest.raises(ValueError, match="decode must be one of auto, eager, static, compiled"):
        resolve_decode("fast", _Model("cpu"))
    p = SamplingParams(n=4, temperature=0.7, seed=2)
    assert p.decode == "auto" and {p.replace(decode=m).key() for m in static_step.DECODE_MODES} == {p.key()}
    with pytest.raises(ValueError, match="SamplingParams.decode must be one of"):
        SamplingParams(decode="cuda-graphs")
