"""evals/passk_majk.py end to end on the embedded model and its error handling (the training callback:
tests/evaluation/test_callback.py; adapters loaded onto their base: tests/evaluation/test_backends.py)."""

import importlib.util
import json
import subprocess
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from grpo_ext.cli import run_cli
from grpo_ext.evaluation.metrics import answer_diversity, cover_at, maj_at_k, pass_at_k, pass_hat_k
from grpo_ext.tasks import get_task

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "evals" / "passk_majk.py"


def _model() -> str:
    return "embedded"


@pytest.fixture(scope="module")
def cli():
    spec = importlib.util.spec_from_file_location("passk_majk_cli", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def small_run(tmp_path_factory, python):
    """One real run of the script as a user runs it (a subprocess), small n and limit."""
    out = tmp_path_factory.mktemp("passk")
    args = [
        "--model",
        _model(),
        "--n",
        "8",
        "--k",
        "1,2,4,8",
        "--limit",
        "12",
        "--max-new-tokens",
        "40",
        "--batch-size",
        "4",
        "--out",
        str(out),
        "--no-progress",
    ]
    proc = subprocess.run([python, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, args, proc


def test_cli_writes_report_json_png_and_cache(small_run):
    out, _, proc = small_run
    for name in ("report.md", "report.json", "passk_majk.png", "samples.jsonl"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    assert (out / "passk_majk.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "report.md").read_text()
    assert "| k | pass@k | maj@k | pass^k |" in md and "answers extracted" in md and "temperature 0.7" in md
    assert "| tau | Cover@tau |" in md and "distinct answers per problem" in md
    assert "95% percentile bootstrap interval over problems (10000 resamples, seed 0)" in md
    report = json.loads((out / "report.json").read_text())
    assert report["bootstrap"]["n_resamples"] == 10_000 and report["bootstrap"]["seed"] == 0
    (result,) = report["models"]
    for k in ("1", "8"):  # every mean has its interval, and the interval holds it
        low, high = result["intervals"]["pass@k"][k]
        assert low <= result["pass@k"][k] <= high
    assert set(result["intervals"]["cover@tau"]) == {"0.1", "0.5", "0.9"} and report["comparisons"] == []
    assert "mean accuracy" in proc.stdout
    assert not list(out.glob(".*.tmp"))  # atomic writes leave no temporary files


def test_report_numbers_equal_metrics_recomputed_from_the_cache(small_run):
    out, _, _ = small_run
    report = json.loads((out / "report.json").read_text())
    (result,) = report["models"]
    task = get_task("arithmetic")
    by_problem = defaultdict(dict)
    for line in (out / "samples.jsonl").read_text().splitlines():
        record = json.loads(line)
        by_problem[record["problem_id"]][record["sample_index"]] = record["completion"]
    answers = {p["problem_id"]: p["answer"] for p in result["per_problem"]}
    assert len(by_problem) == result["n_problems"] == 12
    for k in (1, 2, 4, 8):
        passes, majs = [], []
        for pid, samples in by_problem.items():
            completions = [samples[i] for i in range(8)]
            correct = [task.is_correct(c, answers[pid]) for c in completions]
            passes.append(pass_at_k(8, sum(correct), k))
            majs.append(maj_at_k([task.extract_answer(c) for c in completions], correct, k))
        assert result["pass@k"][str(k)] == pytest.approx(np.mean(passes), abs=1e-12)
        assert result["maj@k"][str(k)] == pytest.approx(np.mean(majs), abs=1e-12)
    assert result["mean_accuracy"] == pytest.approx(result["pass@k"]["1"], abs=1e-12)
    hats, covers, distinct, entropy = [], [], [], []
    for pid, samples in by_problem.items():
        completions = [samples[i] for i in range(8)]
        c = sum(task.is_correct(x, answers[pid]) for x in completions)
        hats.append(pass_hat_k(8, c, 4))
        covers.append(cover_at(8, c, 0.5))
        distinct.append(answer_diversity([task.extract_answer(x) for x in completions]).distinct)
        entropy.append(answer_diversity([task.extract_answer(x) for x in completions]).entropy)
    assert result["pass^k"]["4"] == pytest.approx(np.mean(hats), abs=1e-12)
    assert result["cover@tau"]["0.5"] == pytest.approx(np.mean(covers), abs=1e-12)
    assert result["distinct_answers"] == pytest.approx(np.mean(distinct), abs=1e-12)
    assert result["answer_entropy"] == pytest.approx(np.mean(entropy), abs=1e-12)


def test_rerun_reuses_the_cache_and_other_k_need_no_sampling(small_run, cli):
    out, args, _ = small_run
    first = json.loads((out / "report.json").read_text())["models"][0]
    again = cli.main(args)["results"][0]
    assert again["samples"]["generated"] == 0 and again["samples"]["from_cache"] == 96
    assert again["pass@k"] == first["pass@k"] and again["maj@k"] == first["maj@k"]
    fewer_k = cli.main([*args, "--k", "1,8"])["results"][0]  # a later --k wins in argparse
    assert fewer_k["samples"]["generated"] == 0 and fewer_k["ks"] == [1, 8]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--task", "arithmetc"], "unknown task 'arithmetc'"),
        (["--model", "/nonexistent/model"], "no such model folder: /nonexistent/model"),
        (["--n", "4", "--k", "1,2,8"], "--k 8 exceeds --n 4"),
        (["--limit", "0"], "no problems to evaluate"),
        (["--k", "1,two"], "comma-separated integers"),
        (["--task-kwargs", "{max_operands: 3"], "--task-kwargs is not valid JSON"),
        (["--task-kwargs", '{"max_operand": 3}'], "bad task_kwargs"),
        (["--tau", "0.5,1.5"], "--tau: every tau must be in [0, 1]"),
        (["--tau", "half"], "comma-separated numbers"),
        (["--bootstrap-resamples", "0"], "--bootstrap-resamples must be >= 1"),
        (["--solved-threshold", "0"], "--solved-threshold must be in (0, 1]"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(cli, capsys, tmp_path, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        run_cli(cli.main, ["--model", _model(), *argv, "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "samples.jsonl").exists()


def test_empty_dataset_is_one_line_and_exit_code_2(cli, capsys, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(SystemExit) as exit_info:
        run_cli(
            cli.main,
            [
                "--model",
                _model(),
                "--task",
                "jsonl",
                "--task-kwargs",
                json.dumps({"path": str(empty)}),
                "--out",
                str(tmp_path / "out"),
            ],
        )
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "empty.jsonl" in err and len(err.splitlines()) == 1, err


def test_the_script_itself_exits_2_with_one_line(python, tmp_path):
    proc = subprocess.run(
        [python, str(SCRIPT), "--task", "nope", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [errors[0]] and "unknown task 'nope'" in errors[0] and "Traceback" not in proc.stderr


def test_read_report_gives_back_what_the_harness_wrote(small_run, tmp_path):
    from grpo_ext.evaluation.report import metric_table, read_report

    out, _, _ = small_run
    written = json.loads((out / "report.json").read_text())["models"][0]
    result = read_report(out)  # the folder, its report.json, or a file holding one result read the same
    assert result == written == read_report(out / "report.json", "embedded")
    assert metric_table(result, "pass@k") == {k: written["pass@k"][str(k)] for k in written["ks"]}

    older = {k: v for k, v in written.items() if k not in ("params_key", "task", "task_id")}
    (tmp_path / "one.json").write_text(json.dumps({**older, "task": "arithmetic"}))
    assert read_report(tmp_path / "one.json")["params_key"] == written["params_key"]  # filled from params
    (tmp_path / "bare.json").write_text(json.dumps(older))
    with pytest.raises(ValueError, match="no 'task'"):
        read_report(tmp_path / "bare.json")
    two = [older, {**older, "model": "runs/b"}]
    (tmp_path / "report.json").write_text(json.dumps({"task": "arithmetic/test", "models": two}))
    assert read_report(tmp_path, "b")["task_id"] == "arithmetic/test"  # the report's task; a path's last part
    with pytest.raises(ValueError, match="2 models"):
        read_report(tmp_path)
    (tmp_path / "twice.json").write_text(json.dumps({"task": "arithmetic/test", "models": [older, older]}))
    with pytest.raises(ValueError, match="several model named 'embedded'"):
        read_report(tmp_path / "twice.json", "embedded")
    (tmp_path / "bad.json").write_text(json.dumps({**written, "pass@k": {"one": 0.5}}))
    with pytest.raises(ValueError, match="non-integer k"):
        read_report(tmp_path / "bad.json")
    assert read_report(tmp_path / "one.json", require=("ks", "n"))["n"] == 8
    with pytest.raises(ValueError, match="missing training_cost"):
        read_report(tmp_path / "one.json", require=("ks", "training_cost"))


def test_harness_flags_are_checked_before_any_model_is_loaded():
    from grpo_ext.evaluation.cli import HarnessArgumentParser, add_harness_arguments, harness_settings, task_kwargs_flag
    from grpo_ext.evaluation.registry import default_ks

    assert default_ks(64) == [1, 2, 4, 8, 16, 32, 64] and default_ks(6) == [1, 2, 4, 6] and default_ks(1) == [1]
    with pytest.raises(ValueError, match="must be a JSON object"):
        task_kwargs_flag("[1, 2]")
    parser = add_harness_arguments(HarnessArgumentParser(prog="x"))
    with pytest.raises(ValueError, match="see --help"):  # not SystemExit: run_cli prints one line
        parser.parse_args(["--n", "many"])
    settings = harness_settings(parser.parse_args(["--n", "4", "--task-kwargs", '{"max_operands": 3}']))
    assert settings.ks == [1, 2, 4] and settings.limit == 200 and settings.params.max_new_tokens == 48
    # the sampler's memory grows with batch_size x n: the default batch shrinks for large n (samples do not change)
    batch = {n: harness_settings(parser.parse_args(["--n", str(n)])).params.batch_size for n in (16, 64, 256, 1024)}
    assert batch == {16: 8, 64: 8, 256: 2, 1024: 1}
    assert harness_settings(parser.parse_args(["--n", "1024", "--batch-size", "4"])).params.batch_size == 4
    assert harness_settings(parser.parse_args(["--n", "1024"])).ks == [2**i for i in range(11)]
    assert settings.task_id == 'arithmetic/test {"max_operands": 3}'
    assert settings.params.decode == "auto"
    static = harness_settings(parser.parse_args(["--decode", "static"])).params
    assert static.decode == "static" and static.key() == settings.params.key()  # the decode step is not in the key
    with pytest.raises(ValueError, match="--decode"):
        parser.parse_args(["--decode", "fast"])


@pytest.fixture(scope="module")
def two_models(tmp_path_factory, cli):
    """The embedded model (A) against a copy with perturbed weights (B), through the script's main."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_ext.model_paths import resolve_model_path

    folder = tmp_path_factory.mktemp("models") / "perturbed"
    base = resolve_model_path(_model())
    model = AutoModelForCausalLM.from_pretrained(base)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * p.std() * torch.randn(p.shape, generator=generator))
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(base).save_pretrained(folder)
    out = tmp_path_factory.mktemp("two")
    argv = ["--model", _model(), "--model", str(folder), "--n", "8", "--limit", "16", "--max-new-tokens", "40"]
    argv += ["--bootstrap-resamples", "500", "--bootstrap-seed", "7", "--out", str(out), "--no-progress"]
    return out, cli.main(argv)


def test_two_models_get_a_paired_comparison(two_models, capsys):
    from grpo_ext.evaluation.analysis import BootstrapSettings, compare_models
    from grpo_ext.evaluation.report import read_comparisons

    out, ran = two_models
    a, b = ran["results"]
    assert (out / "per_problem_accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (comparison,) = read_comparisons(out)
    assert (comparison["a"], comparison["b"], comparison["n_problems"]) == ("embedded", b["model"], 16)
    # what the report holds is the comparison recomputed from the two results, with the recorded settings
    assert comparison == json.loads(json.dumps(compare_models(a, b, BootstrapSettings(n_resamples=500, seed=7))))
    for k in ("1", "8"):
        o = comparison["solved_overlap"][k]
        assert o["both"] + o["only_a"] + o["only_b"] + o["neither"] == 16
        solved_a = sum(p["n_correct"] >= 1 for p in a["per_problem"])  # at k = n: solved iff any sample is right
        if k == "8":
            assert o["both"] + o["only_a"] == solved_a
    diff = comparison["difference"]["pass@k"]["1"]["difference"]
    assert diff == pytest.approx(b["pass@k"]["1"] - a["pass@k"]["1"], abs=1e-12)
    md = (out / "report.md").read_text()
    assert f"## B against A: {b['model']} (B) vs embedded (A)" in md and "crossover of pass@k" in md
    assert "500 resamples, seed 7" in md
