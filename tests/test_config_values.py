"""Values a config or a study takes silently and wrongly, or only after minutes of work (issue 40): each is one line
naming the field, exit 2, through the command line's code path, before any training."""

import pytest

from grpo_ext.script_args import parse_train_args
from tests.bad_inputs import CONFIG, check_one_line, parse, run_train, written
from tests.experiments.study.test_study_driver import STUDY, fresh_driver
from tests.test_bad_inputs_silent import study_edit, yaml_alone


def study_run(old, new):
    """scripts/run_methods.py on configs/compare.yaml with `old` replaced by `new`: fails before anything runs."""

    def trigger(tmp):
        path = tmp / "study.yaml"
        path.write_text(STUDY.read_text().replace(old, new, 1))
        try:
            return fresh_driver().main(["--study", str(path), "--out", str(tmp / "out")])
        finally:
            assert not (tmp / "out").exists()  # refused before any run

    return trigger


BOMB = (  # six lines that stand for a million values ("billion laughs")
    "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    + "".join(f"{x}: &{x} [{', '.join([f'*{p}'] * 10)}]\n" for p, x in zip("abcde", "bcdef", strict=True))
    + "learning_rate: *f\n"
)

CASES = {
    # generation_kwargs overrides the sampling fields: their ranges (the sampler and TRL read 0 differently)
    "generation_kwargs top_p 0": (
        parse("--generation_kwargs", '{"top_p": 0.0}'),
        r"generation_kwargs\.top_p: must be in \(0, 1\], got 0\.0",
    ),
    "generation_kwargs temperature 0": (
        parse("--generation_kwargs", '{"temperature": 0.0}'),
        r"generation_kwargs\.temperature: must be in \(0, inf\), got 0\.0",
    ),
    "generation_kwargs top_k -5": (
        parse("--generation_kwargs", '{"top_k": -5}'),
        r"generation_kwargs\.top_k: must be in \[0, inf\)",
    ),
    "generation_kwargs min_p 5": (
        parse("--generation_kwargs", '{"min_p": 5}'),
        r"generation_kwargs\.min_p: must be in \[0, 1\]",
    ),
    "top_k None with the sampler": (
        yaml_alone("use_cpu: true\nbf16: false\ntop_k: null\ngeneration_backend: sampler\n"),
        r"top_k: None means transformers' default top-k .* on TRL's path but no top-k on generation_backend `sampler`",
    ),
    "sampler_decode typo with the trl backend": (
        parse("--sampler_decode", "bogus"),
        r"sampler_decode.*invalid choice: 'bogus'",
    ),
    "a number where true or false is expected": (
        yaml_alone("use_cpu: true\nbf16: false\nprocess_include_outcome: 3\n"),
        r"process_include_outcome: .*config\.yaml gives 3 where true or false is expected",
    ),
    "completions longer than the model's context": (
        run_train("--max_completion_length", "400"),
        r"max_completion_length: 400 is more than the model's 128 positions \(max_position_embeddings\)",
    ),
    "a YAML alias bomb": (
        written("config.yaml", BOMB, lambda path: parse_train_args(["--config", str(path)])),
        r"--config: .*config\.yaml expands to more than 100,000 values through its aliases",
    ),
    # studies: checked when the study is read, or before its first run
    "study: a fractional seed": (
        study_edit("seeds: [0, 1, 2]", "seeds: [0.5, 1, 2]"),
        r"study\.yaml: seeds: expected an integer, got 0\.5",
    ),
    "study: a negative seed": (
        study_edit("seeds: [0, 1, 2]", "seeds: [-1, 1, 2]"),
        r"study\.yaml: seeds: must be in \[0, 4294967295\], got -1",
    ),
    "study: a negative override, before any run": (
        study_run("overrides: {zero_std_groups: skip}", "overrides: {zero_std_groups: skip, max_steps: -5}"),
        r"study\.yaml: arms\.outcome_skip: max_steps: must be in \[1, inf\) or -1, got -5",
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_a_bad_value_is_one_line_exit_2_naming_the_field(case, tmp_path, capsys):
    check_one_line(*CASES[case], tmp_path, capsys)


def test_the_configs_decode_steps_are_the_samplers(tmp_path):
    from grpo_ext.config import SAMPLER_DECODES
    from grpo_ext.sampler.static_step import DECODE_MODES

    assert SAMPLER_DECODES == DECODE_MODES


def test_what_stays_accepted(tmp_path):
    """Aliases of a normal size, YAML's own booleans and strings, and an in-range generation_kwargs."""
    path = tmp_path / "c.yaml"
    path.write_text("use_cpu: true\nbf16: false\nx: &lr 1e-4\nprocess_include_outcome: 'no'\n")
    path.write_text(path.read_text().replace("x: &lr 1e-4\n", ""))
    _, args, _ = parse_train_args(["--config", str(path), "--generation_kwargs", '{"top_p": 0.9, "top_k": 5}'])
    assert args.process_include_outcome is False and args.generation_kwargs == {"top_p": 0.9, "top_k": 5}
    assert CONFIG  # the shipped config parses with these checks (tests/test_bad_inputs.py's table uses it)
