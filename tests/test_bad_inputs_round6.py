"""Issue 52's last cases: `generation_kwargs` held to one allow-list with ranges (an override of a field TRL sets
itself, a typo, a token id or num_return_sequences), a `train_size` larger than a sane bound or than the task's problem
space refused before any prompt is built, and the arithmetic knobs bounded (`task_kwargs.digits: 100000` was a
traceback). Each goes through the entry point the user runs: one line naming the field, exit 2."""

import time

import pytest

from grpo_ext.errors import UserError
from tests.bad_inputs import check_one_line
from tests.test_bad_inputs_round5 import passk_majk, run_train

# ---- generation_kwargs -------------------------------------------------------------------------------------------

GENERATION_KWARGS_CASES = {
    "max_new_tokens overrode max_completion_length silently": (
        '{"max_new_tokens": 5}',
        r"generation_kwargs\.max_new_tokens: set max_completion_length instead",
    ),
    "a typo was ignored": (
        '{"temprature": 0.7}',
        r"generation_kwargs\.temprature: not a generation setting grpo-ext accepts with generation_backend `trl` "
        r"\(did you mean temperature\?\); accepted: temperature, ",
    ),
    "an unknown key was ignored": ('{"foo": 1}', r"generation_kwargs\.foo: not a generation setting grpo-ext accepts"),
    "eos_token_id 99999 was accepted": ('{"eos_token_id": 99999}', r"generation_kwargs\.eos_token_id: TRL ends and"),
    "pad_token_id -7 was accepted": ('{"pad_token_id": -7}', r"generation_kwargs\.pad_token_id: TRL pads with"),
    "num_return_sequences 3 was a traceback": (
        '{"num_return_sequences": 3}',
        r"generation_kwargs\.num_return_sequences: set num_generations instead",
    ),
    "a vLLM key without use_vllm": ('{"presence_penalty": 0.5}', r"generation_kwargs\.presence_penalty: not read with"),
    "typical_p out of range (transformers' traceback at step 0)": (
        '{"typical_p": 0}',
        r"generation_kwargs\.typical_p: must be in \(0, 1\], got 0",
    ),
    "min_new_tokens above max_completion_length": (
        '{"min_new_tokens": 9}',
        r"generation_kwargs\.min_new_tokens: must be in \[0, 8\], got 9",
    ),
    "do_sample not a boolean": ('{"do_sample": "yes"}', r"generation_kwargs\.do_sample: expected true, got 'yes'"),
}


@pytest.mark.parametrize("case", GENERATION_KWARGS_CASES)
def test_generation_kwargs_hold_only_what_means_something_here(case, tmp_path, capsys):
    value, message = GENERATION_KWARGS_CASES[case]
    check_one_line(run_train("--generation_kwargs", value), message, tmp_path, capsys)
    assert not (tmp_path / "out").exists()


def test_the_sampler_backend_refuses_in_the_config_what_it_cannot_honour(tmp_path, capsys):
    """typical_p is read by transformers' generate (TRL's path), not by the sampler: refused when the config is parsed
    (it was refused only once the trainer was built, the model loaded), in the sampler's own words."""
    from grpo_ext.script_args import parse_train_args

    flags = ["--generation_backend", "sampler", "--generation_kwargs", '{"typical_p": 0.9}']
    message = r"generation_kwargs: typical_p cannot be honoured by generation_backend `sampler` \(it honours .*\)"
    with pytest.raises(UserError, match=message + "; remove it or use generation_backend `trl`$"):
        parse_train_args(["--config", "configs/default.yaml", "--output_dir", str(tmp_path), *flags])
    check_one_line(run_train(*flags), message, tmp_path, capsys)


def test_the_allow_list_is_the_samplers_and_accepts_what_it_names(tmp_path):
    from grpo_ext.rollouts import HONOURED
    from grpo_ext.script_args import parse_train_args
    from grpo_ext.validation import GENERATION_KWARGS

    sampler_reads = {name for name, (readers, _) in GENERATION_KWARGS.items() if "sampler" in readers}
    assert sampler_reads == {*HONOURED, "do_sample", "repetition_penalty"}
    given = '{"temperature": 0.8, "top_k": 5, "typical_p": 0.9, "no_repeat_ngram_size": 3, "min_new_tokens": 2}'
    common = ["--config", "configs/default.yaml", "--output_dir", str(tmp_path), "--max_completion_length", "8"]
    _, args, _ = parse_train_args([*common, "--generation_kwargs", given])
    assert args.generation_kwargs["typical_p"] == 0.9
    _, args, _ = parse_train_args([*common, "--use_vllm", "true", "--generation_kwargs", '{"stop": ["\\n"]}'])
    assert args.generation_kwargs == {"stop": ["\n"]}
    with pytest.raises(UserError, match=r"generation_kwargs\.stop: expected a non-empty string or a list of them"):
        parse_train_args([*common, "--use_vllm", "true", "--generation_kwargs", '{"stop": [""]}'])


# ---- train_size ----------------------------------------------------------------------------------------------------


def test_a_huge_train_size_is_refused_before_any_prompt_is_built(tmp_path, capsys):
    """1e11 built a data set for over ten minutes at 6.6 GB and growing."""
    start = time.monotonic()
    message = r"train_size: 100000000000 is more than 1,000,000 prompts"
    check_one_line(run_train("--train_size", "100000000000"), message, tmp_path, capsys)
    assert time.monotonic() - start < 60


def test_a_train_size_beyond_the_tasks_problem_space_is_refused_before_building(tmp_path, capsys):
    """One-digit sums of two operands: 100 problems in all; 900,000 asked drew 180M random problems first."""
    start = time.monotonic()
    knobs = '{"min_operands": 2, "max_operands": 2, "digits": 1, "operators": "+"}'
    message = (
        r"train_size: 900000 is more than the 100 distinct problems task 'arithmetic' draws with these task_kwargs"
    )
    check_one_line(run_train("--task_kwargs", knobs, "--train_size", "900000"), message, tmp_path, capsys)
    assert time.monotonic() - start < 60


# ---- the arithmetic knobs ------------------------------------------------------------------------------------------

KNOB_CASES = {
    "digits 100000 (a traceback in train.py)": (
        '{"digits": 100000}',
        r"arithmetic: digits must be <= 100, got 100000 \(task_kwargs\.digits: 1 to 100\)",
    ),
    "max_operands 100000": (
        '{"max_operands": 100000}',
        r"arithmetic: max_operands must be <= 100, got 100000 \(task_kwargs\.max_operands",
    ),
}


@pytest.mark.parametrize("case", KNOB_CASES)
def test_the_arithmetic_knobs_are_bounded_in_training(case, tmp_path, capsys):
    knobs, message = KNOB_CASES[case]
    check_one_line(run_train("--task_kwargs", knobs), message, tmp_path, capsys)


def test_the_arithmetic_knobs_are_bounded_in_the_harness(tmp_path, capsys):
    """The harness's error named no field."""
    message = r"arithmetic: digits must be <= 100, got 100000 \(task_kwargs\.digits: 1 to 100\)"
    check_one_line(passk_majk("--task-kwargs", '{"digits": 100000}'), message, tmp_path, capsys)


def test_word_arithmetic_takes_the_same_bounds(tmp_path, capsys):
    message = r"arithmetic: digits must be <= 100, got 100000 \(task_kwargs\.digits"
    flags = ("--task", "word_arithmetic", "--task_kwargs", '{"digits": 100000}')
    check_one_line(run_train(*flags), message, tmp_path, capsys)


# ---- make docs (scripts/render_docs.py) ----------------------------------------------------------------------------


def _docs_with(tmp, block: str, source: str, text: str | None, monkeypatch):
    """A checkout at ``tmp`` whose docs/a.md holds block ``block``, the toy renderer reading ``source`` (written with
    ``text``; None: missing); the entry point's trigger."""
    from scripts import render_docs

    (tmp / "docs").mkdir()
    (tmp / "docs" / "a.md").write_text(f"intro\n<!-- render: {block} -->\nold\n<!-- /render -->\n")
    if text is not None:
        (tmp / source).write_text(text)
    monkeypatch.setitem(render_docs.RENDERERS, "toy", (lambda r: f"x = {r['x']:.3f}", (source,)))
    render_docs.load_source.cache_clear()
    return lambda check: lambda t: render_docs.main(["--check"] if check else [], root=tmp)


DOCS_CASES = {
    "a missing source (FileNotFoundError)": (
        "toy",
        "r.json",
        None,
        r"docs/a\.md: r\.json: cannot be read \(No such file or directory\)",
    ),
    "a junk JSON source (JSONDecodeError)": (
        "toy",
        "r.json",
        "{x: 1",
        r"docs/a\.md: r\.json: not valid JSON \(Expecting property name enclosed in double quotes at line 1 column 2\)",
    ),
    "a source without what the renderer reads (KeyError)": (
        "toy",
        "r.json",
        '{"y": 1}',
        r"docs/a\.md: render block 'toy': r\.json do not hold what it reads \(KeyError: 'x'\)",
    ),
    "a block whose renderer is unknown (KeyError)": (
        "nope",
        "r.json",
        '{"x": 1}',
        r"docs/a\.md: no renderer named 'nope' \(scripts/render_docs\.py: ",
    ),
}


@pytest.mark.parametrize("check", [False, True], ids=["make docs", "--check"])
@pytest.mark.parametrize("case", DOCS_CASES)
def test_make_docs_names_the_file_it_cannot_render(case, check, tmp_path, monkeypatch, capsys):
    from scripts import render_docs

    block, source, text, message = DOCS_CASES[case]
    trigger = _docs_with(tmp_path, block, source, text, monkeypatch)(check)
    check_one_line(trigger, message, tmp_path, capsys)
    assert (tmp_path / "docs" / "a.md").read_text().count("old") == 1  # nothing written
    render_docs.load_source.cache_clear()


def test_make_docs_still_renders_a_good_source(tmp_path, monkeypatch):
    from scripts import render_docs

    _docs_with(tmp_path, "toy", "r.json", '{"x": 0.25}', monkeypatch)
    assert render_docs.main([], root=tmp_path) == 0
    assert "x = 0.250" in (tmp_path / "docs" / "a.md").read_text()
    assert render_docs.main(["--check"], root=tmp_path) == 0
    render_docs.load_source.cache_clear()
