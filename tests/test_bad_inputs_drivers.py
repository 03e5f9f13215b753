"""The bad-input table for the drivers (the adversarial pass over the newest surfaces): the
compare CLI's runs, dict fields of the training config, the study driver's flags, the scripts' own parsers, the
sampler's stop strings. The check and the helpers are tests/test_bad_inputs_model_files.py's."""

import importlib
from pathlib import Path

import pytest

from grpo_ext.model_paths import EMBEDDED_MODEL_DIR
from scripts import publish, train
from tests.bad_inputs import check_one_line, parse, yaml_config
from tests.test_bad_inputs_model_files import harness_flags, harness_main, run_folder, train_flags

CASES = {
    "compare: one checkpoint under two names and paths": (
        lambda tmp: compare_runs("base=embedded", f"sft@seed0={EMBEDDED_MODEL_DIR}/"),
        r"--run sft@seed0 and --run base are the same checkpoint \(.*embedded\): one model would be counted twice",
    ),
    "compare: a checkpoint whose run failed": (
        lambda tmp: compare_runs("base=embedded", f"sft={run_folder('failed')(tmp)}"),
        r"--run sft: the training run in .*run did not finish \(grpo_ext_run\.json: failed at step 3: killed\); "
        r"compare one of its checkpoint-N folders, or pass --allow-unfinished",
    ),
    # the adversarial pass: dict fields, study flags, scripts' own parsers
    "generation_kwargs not JSON (a traceback-free line that named no field)": (
        parse("--generation_kwargs", "{top_p: 1"),
        r"generation_kwargs: not valid JSON \(Expecting property name .* at column 2\): '\{top_p: 1'",
    ),
    "generation_kwargs a JSON list (a traceback)": (
        parse("--generation_kwargs", "[1, 2]"),
        r"generation_kwargs: expected a JSON object like .*, got '\[1, 2\]'",
    ),
    "generation_kwargs a YAML list (a traceback)": (
        yaml_config("generation_kwargs: [1, 2]\n"),
        r"generation_kwargs: expected a JSON object like .*, got \[1, 2\]",
    ),
    "model_init_kwargs a word": (parse("--model_init_kwargs=nope"), r"model_init_kwargs: expected a JSON object"),
    "study --estimate with an unknown arm (was priced whole)": (
        lambda tmp: run_methods(["--study", "configs/compare.yaml", "--arms", "nope", "--estimate"]),
        r"unknown arm 'nope'; the study has",
    ),
    "study --estimate with --jobs 0 (was accepted)": (
        lambda tmp: run_methods(["--study", "configs/compare.yaml", "--jobs", "0", "--estimate"]),
        r"--jobs: must be >= 1, got 0",
    ),
    "study --model missing with --estimate (was accepted)": (
        lambda tmp: run_methods(["--study", "configs/compare.yaml", "--model", "./nope", "--estimate"]),
        r"no such model folder: \./nope",
    ),
    "study: --rehearsal-tokenizer with --model (was ignored)": (
        lambda tmp: run_methods(
            [
                "--study",
                "configs/real/study.yaml",
                "--quick",
                "--model",
                "embedded",
                "--rehearsal-tokenizer",
                str(tmp),
                "--estimate",
            ]
        ),  # fmt: skip
        r"--rehearsal-tokenizer: only with --quick on a study whose base is not the embedded model \(and no --model\)",
    ),
    "study: a learning rate written twice (trained twice)": (
        lambda tmp: run_methods(
            [
                "--study",
                str(study_edited(tmp, "learning_rates: [5.0e-5,", "learning_rates: [5.0e-5, 0.00005,")),
                "--estimate",
            ]
        ),  # fmt: skip
        r"study\.yaml: learning_rates repeats \[5e-05\] \(a value given twice is trained twice\)",
    ),
    "study --report-only on a folder without a search (would render nothing true)": (
        lambda tmp: run_methods(["--study", "configs/compare.yaml", "--out", str(tmp), "--report-only"]),
        r"--report-only: .*search\.json is missing: the study in .* has not finished its search",
    ),
    "real_model.py: an unknown flag (argparse's usage, 2 lines)": (
        lambda tmp: script("real_model").main(["--model", "x"]),
        r"unrecognized arguments: --model x \(see --help\)",
    ),
    "publish.py: no --repo-id (argparse's usage)": (
        lambda tmp: publish.main([str(EMBEDDED_MODEL_DIR)]),
        r"the following arguments are required: --repo-id",
    ),
    "sampler: a stop string the tokenizer cannot write (never ended a sample)": (
        lambda tmp: train.main(train_flags(tmp, "embedded", "--generation_backend", "sampler", "--stop_strings", "Q:")),
        r"stop_strings: 'Q:' holds characters this model's tokenizer cannot write",
    ),
    "generation_kwargs do_sample false (every group zero-std)": (
        parse("--generation_kwargs", '{"do_sample": false}'),
        r"generation_kwargs\.do_sample: false draws every completion of a group alike",
    ),
    "harness: an empty --model": (
        lambda tmp: harness_main(harness_flags(tmp, "--model", "")),
        r"--model: empty; give a model folder",
    ),
}


def compare_runs(*specs):
    from grpo_ext.experiments.compare.runs import parse_runs

    return parse_runs(list(specs))


def run_methods(argv):
    from tests.experiments.study.test_study_driver import fresh_driver

    return fresh_driver().main(argv)


def study_edited(tmp, old, new):
    text = Path("configs/compare.yaml").read_text()
    assert old in text
    path = tmp / "study.yaml"
    path.write_text(text.replace(old, new))
    return path


def script(name):
    return importlib.import_module(f"scripts.{name}")


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_bad_input_is_one_line_exit_2_naming_the_culprit(case, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # the repository root, as the CLIs run; restored after
    check_one_line(*CASES[case], tmp_path, capsys)
