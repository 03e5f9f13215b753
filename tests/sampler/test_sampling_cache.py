"""The sampler (seeded, continuous batching), the resumable sample cache and the backends, on tiny models."""

import json
import logging
import os

import pytest
import torch

from grpo_ext.evaluation.backends import (
    Backend,
    BackendUnavailableError,
    TransformersBackend,
    VLLMBackend,
    load_backend,
    vllm_available,
)
from grpo_ext.evaluation.cache import SampleCache
from grpo_ext.evaluation.harness import evaluate_model
from grpo_ext.io import atomic_write_text
from grpo_ext.sampler import sampling
from grpo_ext.sampler.sampling import SamplingParams, derive_seed, sample
from grpo_ext.tasks import get_task

# prompts of different lengths: left padding is exercised
PROMPTS = ["1+2=", "37+45-18=", "9=", "12-3+40-7=", "5+5="]


@pytest.fixture(scope="module")
def tiny(tiny_char_llama):
    """A random 2-layer Llama with the project's character tokenizer (never stops early: every sample is long)."""
    return tiny_char_llama(tie_word_embeddings=True)


# ---- SamplingParams ---------------------------------------------------------------------------------------------


def test_params_key_is_stable_and_names_the_distribution():
    p = SamplingParams(n=64, temperature=0.7, top_p=1.0, max_new_tokens=48, seed=3, batch_size=8)
    assert p.key() == "temperature=0.7,top_p=1.0,max_new_tokens=48,seed=3"
    assert p.replace(n=8, batch_size=2).key() == p.key()  # n and batch size do not change the distribution
    assert p.replace(temperature=1).key() != p.key() and p.replace(seed=4).key() != p.key()
    assert SamplingParams(temperature=1).key() == SamplingParams(temperature=1.0).key()
    with pytest.raises(ValueError, match="greedy"):
        SamplingParams(n=4, temperature=0)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0)
    with pytest.raises(ValueError, match="n must be"):
        SamplingParams(n=0)


# ---- the sampler ------------------------------------------------------------------------------------------------


def test_sampler_is_deterministic_for_a_seed_and_leaves_the_global_rng_alone(tiny):
    model, tok = tiny
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=8, seed=1, batch_size=2)
    state = torch.get_rng_state()
    a = sample(model, tok, PROMPTS, params, progress=False)
    assert torch.equal(state, torch.get_rng_state())
    torch.manual_seed(123)  # whatever ran before does not matter
    b = sample(model, tok, PROMPTS, params, progress=False)
    c = sample(model, tok, PROMPTS, params.replace(seed=2), progress=False)
    assert a == b
    assert a != c
    assert [len(x) for x in a] == [4] * len(PROMPTS)
    assert all(len(set(x)) > 1 for x in a)  # n samples of a prompt are distinct draws, not copies


def test_continuous_equals_plain_generate_greedy(tiny):
    model, tok = tiny
    params = SamplingParams(n=1, temperature=0, max_new_tokens=12, batch_size=2)  # 2 slots: refills, compaction
    continuous = sample(model, tok, PROMPTS, params, progress=False, continuous=True)
    plain = sample(model, tok, PROMPTS, params, progress=False, continuous=False)
    assert continuous == plain  # prompt by prompt against generate: tests/sampler/test_continuous.py


def test_samples_do_not_depend_on_batching_or_n(tiny):
    """Each sample has its own random stream: the batch size, the other prompts and n change nothing."""
    model, tok = tiny
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=10, seed=5, batch_size=3)
    reference = sample(model, tok, PROMPTS, params, progress=False)
    assert sample(model, tok, PROMPTS, params.replace(batch_size=1), progress=False) == reference
    assert sample(model, tok, PROMPTS[::-1], params, progress=False) == reference[::-1]
    assert [x[:2] for x in reference] == sample(model, tok, PROMPTS, params.replace(n=2), progress=False)


def test_samples_do_not_depend_on_the_number_of_slots(tiny, monkeypatch):
    """The sampler's slots are capped (MAX_SLOTS, MAX_CPU_SLOTS on a CPU: its KV-cache memory at large n); fewer slots
    than samples make rows wait for a slot, and change no sample."""
    model, tok = tiny
    params = SamplingParams(n=6, temperature=1.0, max_new_tokens=10, seed=7, batch_size=2)  # 12 slots uncapped
    reference = sample(model, tok, PROMPTS, params, progress=False)
    for cap in (1, 5):
        monkeypatch.setattr(sampling, "MAX_SLOTS", cap)
        monkeypatch.setattr(sampling, "MAX_CPU_SLOTS", cap)
        assert sample(model, tok, PROMPTS, params, progress=False) == reference


def test_samples_in_flight_stay_within_their_bound_and_change_no_sample(tiny, monkeypatch):
    """A prompt is prefilled only while the samples in flight (prefilled, not finished) stay within SAMPLES_PER_SLOT a
    slot, or none is in flight: the waiting forks' copies of keys/values are bounded (12 GB on the real model
    without it). The samples are the same whatever the bound."""
    from grpo_ext.sampler import decoder as decode_loop

    model, tok = tiny
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=10, seed=5, batch_size=4)  # 12 slots
    reference = sample(model, tok, PROMPTS, params, progress=False)
    seen = []
    prefill_more = decode_loop.Decoder.prefill_more

    def recording(self):
        yield from prefill_more(self)
        seen.append((self.in_flight, len(self.rows)))

    monkeypatch.setattr(decode_loop.Decoder, "prefill_more", recording)
    monkeypatch.setattr(sampling, "MAX_CPU_SLOTS", 2)
    # 2 slots, 3 samples a prompt: at 1 a slot (2 in flight) a prompt is admitted only when none is in flight (3); at
    # 2 a slot (4) when one sample of the last is left (1 + 3); at 3 a slot (6) two prompts at once
    for per_slot, most in ((1, 3), (2, 4), (3, 6)):
        monkeypatch.setattr(decode_loop, "SAMPLES_PER_SLOT", per_slot)
        seen.clear()
        assert sample(model, tok, PROMPTS, params, progress=False) == reference
        assert max(in_flight for in_flight, _ in seen) == most, seen


def test_continuous_falls_back_to_generate_when_the_model_does_not_allow_it(tiny, monkeypatch):
    from grpo_ext.sampler import decoder as decode_loop

    model, tok = tiny
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=6, seed=0, batch_size=4)
    expected = sample(model, tok, PROMPTS, params, progress=False, continuous=False)
    monkeypatch.setattr(decode_loop, "_forward_accepts", lambda model, name: False)
    assert sample(model, tok, PROMPTS, params, progress=False) == expected


# ---- the cache, through the harness, with a counting fake backend -----------------------------------------------


class FakeBackend(Backend):
    """Completions are a function of (prompt, seed, draw number): counts calls; can fail after `fail_after` calls."""

    backend_name = "fake"

    def __init__(self, name="fake", fail_after=None):
        self.name, self.fingerprint, self.fail_after = name, "f00", fail_after
        self.calls, self.samples = 0, 0

    def generate(self, prompts, params, *, progress=False):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise RuntimeError("killed")
        self.calls += 1
        self.samples += len(prompts) * params.n
        out = []
        for prompt in prompts:
            right = eval(prompt[:-1])  # "37+45-18=": + and - evaluate left to right, like the task
            out.append([f"#{right if derive_seed(prompt, params.seed, j) % 3 else right + 1}" for j in range(params.n)])
        return out


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def setup(tmp_path):
    task = get_task("arithmetic")
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=8, seed=0, batch_size=3)
    return task, params, tmp_path / "samples.jsonl"


def test_cache_resume_after_a_kill_redoes_nothing_and_loses_nothing(setup):
    task, params, path = setup
    killed = FakeBackend(fail_after=2)
    with pytest.raises(RuntimeError, match="killed"):
        evaluate_model(killed, task, params, [1, 4], path, limit=10, progress=False)
    assert len(_records(path)) == 2 * 3 * 4  # two batches of 3 prompts x 4 samples, durable
    resumed = FakeBackend()
    result = evaluate_model(resumed, task, params, [1, 4], path, limit=10, progress=False)
    assert resumed.samples == (10 - 6) * 4  # only the missing problems
    assert result["samples"] == {**result["samples"], "from_cache": 24, "generated": 16}
    keys = [(r["problem_id"], r["sample_index"]) for r in _records(path)]
    assert len(keys) == len(set(keys)) == 40
    again = FakeBackend()
    assert evaluate_model(again, task, params, [1, 4], path, limit=10, progress=False)["pass@k"] == result["pass@k"]
    assert again.calls == 0


def test_torn_last_line_is_dropped_with_a_warning_and_redrawn(setup, caplog):
    task, params, path = setup
    evaluate_model(FakeBackend(), task, params, [1, 2], path, limit=5, progress=False)
    data = path.read_bytes()
    path.write_bytes(data[:-15])  # crash in the middle of writing the last record
    resumed = FakeBackend()
    with caplog.at_level(logging.WARNING):
        result = evaluate_model(resumed, task, params, [1, 2], path, limit=5, progress=False)
    assert "torn last line" in caplog.text
    assert resumed.samples == 1  # just the lost sample, under a seed of its own
    records = _records(path)  # every line parses again
    assert len(records) == 20 and len({(r["problem_id"], r["sample_index"]) for r in records}) == 20
    assert result["samples"]["from_cache"] == 19


def test_records_of_other_params_models_or_prompts_are_ignored(setup):
    task, params, path = setup
    evaluate_model(FakeBackend(), task, params, [1], path, limit=4, progress=False)
    other_seed = FakeBackend()
    evaluate_model(other_seed, task, params.replace(seed=1), [1], path, limit=4, progress=False)
    assert other_seed.samples == 16
    other_model = FakeBackend(name="other")
    evaluate_model(other_model, task, params, [1], path, limit=4, progress=False)
    assert other_model.samples == 16
    more = FakeBackend()  # raising n reuses the first samples and draws only the new indices
    result = evaluate_model(more, task, params.replace(n=6), [1, 6], path, limit=4, progress=False)
    assert more.samples == 4 * 2 and result["samples"]["from_cache"] == 16
    changed = get_task("arithmetic", seed=1)  # same problem ids, other prompts: nothing reused
    fresh = FakeBackend()
    evaluate_model(fresh, changed, params, [1], path, limit=4, progress=False)
    assert fresh.samples == 16
    assert len(SampleCache(path)) == 16 * 4 + 8


def _record(model="m", problem="0", index=0, completion="#1", params="p"):
    return {
        "model": model,
        "model_fingerprint": "fp",
        "task": "t",
        "problem_id": problem,
        "sample_index": index,
        "params": params,
        "prompt": f"{problem}=",
        "completion": completion,
    }


def test_cache_with_only_keeps_one_group_and_append_can_write_without_keeping(tmp_path, caplog):
    path = tmp_path / "samples.jsonl"
    mine = [_record(problem=str(i), index=j, completion=f"#{i}.{j}") for i in range(3) for j in range(2)]
    others = [_record(model="other", problem=str(i)) for i in range(3)] + [_record(params="q")]
    full = SampleCache(path)
    full.append(mine[:3] + others + mine[3:])
    assert len(full) == len(mine) + len(others)

    only = SampleCache(path, only=("m", "fp", "t", "p"))
    assert len(only) == len(mine)  # the other groups were read past, not kept
    assert only.lookup("m", "fp", "t", "p")[("1", "1=")] == {0: "#1.0", 1: "#1.1"}
    with pytest.raises(ValueError, match="keeps only"):
        only.lookup("other", "fp", "t", "p")
    only.append([_record(problem="9")], remember=False)  # written, not kept
    assert len(only) == len(mine) and ("9", "9=") not in only.lookup("m", "fp", "t", "p")
    only.append([_record(problem="8"), _record(model="other", problem="8")])  # kept: this group's record only
    assert len(only) == len(mine) + 1
    assert len(SampleCache(path)) == len(mine) + len(others) + 3  # every record is in the file

    # read a line at a time: an invalid line in the middle is skipped, a torn last line is cut before appending
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + b"not json\n" + b"".join(lines[1:]) + b'{"model": "m", "prob')
    with caplog.at_level(logging.WARNING):
        torn = SampleCache(path, only=("m", "fp", "t", "p"))
    assert "line 2 is not a valid sample record" in caplog.text and "torn last line" in caplog.text
    assert torn.dropped_lines == 2 and len(torn) == len(mine) + 2
    torn.append([_record(problem="7")], remember=False)
    assert path.read_bytes().endswith(b"\n") and len(SampleCache(path)) == len(mine) + len(others) + 4


def test_harness_drops_k_above_n_with_a_recorded_warning_and_names_bad_rows(setup, caplog):
    task, params, path = setup
    with caplog.at_level(logging.WARNING):
        result = evaluate_model(FakeBackend(), task, params, [1, 4, 8, 16], None, limit=3, progress=False)
    assert result["ks"] == [1, 4] and result["dropped_ks"] == [8, 16]
    assert "k=8,16 > n=4: dropped" in result["warnings"][0] and "dropped" in caplog.text
    with pytest.raises(ValueError, match="every k"):
        evaluate_model(FakeBackend(), task, params, [8], None, limit=3, progress=False)
    with pytest.raises(ValueError, match="empty"):
        evaluate_model(FakeBackend(), task, params, [1], None, problems=[], progress=False)
    with pytest.raises(ValueError, match="row 1 has no reference answer"):
        evaluate_model(
            FakeBackend(),
            task,
            params,
            [1],
            None,
            progress=False,
            problems=[{"prompt": "1+1=", "answer": "2"}, {"prompt": "2+2=", "answer": None}],
        )


# ---- backends and io --------------------------------------------------------------------------------------------


def test_transformers_backend_generates_n_per_prompt(tiny):
    model, tok = tiny
    backend = TransformersBackend(model, tok, name="tiny")
    out = backend.generate(PROMPTS[:3], SamplingParams(n=2, max_new_tokens=3))
    assert [len(x) for x in out] == [2, 2, 2]


class FakeSamplingParams:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


class FakeLLM:
    def __init__(self):
        self.calls = []

    def generate(self, prompts, sampling_params, **kwargs):
        self.calls.append((prompts, sampling_params, kwargs))

        class Out:
            def __init__(self, prompt, sp):
                self.outputs = [type("C", (), {"text": f"{prompt}|{i}"})() for i in range(sp.kwargs["n"])]

        return [Out(p, sp) for p, sp in zip(prompts, sampling_params, strict=True)]


def test_vllm_backend_builds_one_request_per_prompt():
    llm = FakeLLM()
    backend = VLLMBackend(llm=llm, sampling_params_cls=FakeSamplingParams, name="fake-vllm", lora_request="LORA")
    params = SamplingParams(n=3, temperature=0.7, top_p=0.9, max_new_tokens=20, seed=1)
    out = backend.generate(["a=", "b="], params)
    assert out == [["a=|0", "a=|1", "a=|2"], ["b=|0", "b=|1", "b=|2"]]
    prompts, requests, kwargs = llm.calls[0]
    assert prompts == ["a=", "b="] and kwargs == {"use_tqdm": False, "lora_request": "LORA"}
    assert [r.kwargs["n"] for r in requests] == [3, 3]
    assert {(r.kwargs["temperature"], r.kwargs["top_p"], r.kwargs["max_tokens"]) for r in requests} == {(0.7, 0.9, 20)}
    seeds = [r.kwargs["seed"] for r in requests]
    assert seeds[0] != seeds[1] and seeds == [r.kwargs["seed"] for r in backend.requests(["a=", "b="], params)]
    greedy = backend.requests(["a="], SamplingParams(n=1, temperature=0))[0].kwargs
    assert greedy["temperature"] == 0.0 and greedy["top_p"] == 1.0


@pytest.mark.skipif(vllm_available(), reason="vllm is installed here")
def test_asking_for_vllm_without_it_is_a_clear_error():
    with pytest.raises(BackendUnavailableError, match="vllm is not installed"):
        load_backend("embedded", "vllm")
    with pytest.raises(ValueError, match="unknown backend"):
        load_backend("embedded", "tensorrt")


def test_atomic_write_replaces_whole_or_not_at_all(tmp_path, monkeypatch):
    target = tmp_path / "sub" / "report.md"
    atomic_write_text(target, "old")
    assert target.read_text() == "old"

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert sorted(p.name for p in target.parent.iterdir()) == ["report.md"]  # no temporary file left behind


def test_written_files_are_as_readable_as_any_file(tmp_path):
    """Bug 6: mkstemp creates 0600; reports and caches get the umask's usual 0644 (0666 & ~umask)."""
    previous = os.umask(0o022)
    try:
        path = atomic_write_text(tmp_path / "report.json", "{}")
    finally:
        os.umask(previous)
    assert path.stat().st_mode & 0o777 == 0o644


def test_fingerprint_sees_every_byte_of_a_large_weights_file(tmp_path):
    """Bug 4: a 40 MiB weights file retrained in place (same size, same first and last 4 MiB, a middle layer changed)
    gets a new fingerprint, also when its modification time is set back and the file was hashed before in this
    process; the embedded model's fingerprint is its files' names, sizes and bytes (tokenizer included, since issue 26:
    caches written before draw their samples again once)."""
    from grpo_ext.evaluation.cache import model_fingerprint

    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(bytes(40 << 20))
    before = model_fingerprint(tmp_path)
    assert model_fingerprint(tmp_path) == before  # deterministic
    stat = weights.stat()
    with weights.open("r+b") as handle:  # in place: one byte of a middle layer
        handle.seek(20 << 20)
        handle.write(b"\x01")
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert weights.stat().st_size == stat.st_size
    assert model_fingerprint(tmp_path) != before
    assert model_fingerprint(tmp_path / "missing") is None

    import hashlib

    from grpo_ext.model_paths import EMBEDDED_MODEL_DIR

    by_hand = hashlib.sha256()  # name, size and bytes of each config, tokenizer and weights file, sorted by name
    for name in (
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ):
        data = (EMBEDDED_MODEL_DIR / name).read_bytes()
        by_hand.update(f"{name}:{len(data)}:".encode() + data)
    assert model_fingerprint(EMBEDDED_MODEL_DIR) == by_hand.hexdigest()[:16]


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("temperature", float("inf"), "temperature must be a finite number >= 0"),
        ("temperature", float("nan"), "temperature must be a finite number >= 0"),
        ("seed", -1, "seed must be an integer >= 0"),
    ],
)
def test_sampling_params_refuse_what_the_harness_cli_refuses(field, value, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**{field: value})
