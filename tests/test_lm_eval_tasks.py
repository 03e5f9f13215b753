"""lm-eval tasks in evals/lm_eval_tasks: they load offline, and the pass@k / maj@k lm-eval reports are exactly
grpo_ext.evaluation.metrics applied to the very generations lm-eval logged."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from grpo_ext.evaluation.metrics import maj_at_k, pass_at_k
from grpo_ext.models import EMBEDDED_MODEL_DIR
from grpo_ext.tasks.arithmetic import ArithmeticTask
from grpo_ext.tasks.gsm8k import GSM8KTask

ROOT = Path(__file__).resolve().parents[1]
TASKS_DIR = ROOT / "evals" / "lm_eval_tasks"
GSM8K_FILE = ROOT / "tests" / "fixtures" / "gsm8k_sample.jsonl"


def _load_utils():
    spec = importlib.util.spec_from_file_location("grpo_ext_lm_eval_utils", TASKS_DIR / "utils.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


utils = _load_utils()


def _ours(task, generations: list[str], reference: str, ks) -> dict[str, float]:
    """pass@k and maj@k straight from our functions, for comparison."""
    answers = [task.extract_answer(g) for g in generations]
    correct = [task.is_correct(g, reference) for g in generations]
    out = {}
    for k in ks:
        out[f"pass@{k}"] = pass_at_k(len(generations), sum(correct), k)
        out[f"maj@{k}"] = maj_at_k(answers, correct, k)
    return out


# ---- the task functions, without a model --------------------------------------------------------------------------


def test_process_results_receives_all_samples_and_uses_our_metrics():
    generations = ["1+2=3;#3", "1+2=3;#3", "1+2=4;#4", "garbage", "1+2=4;#4", "1+2=3;#3"]
    metrics = utils.process_results_arithmetic({"answer": "3"}, [generations])
    assert set(metrics) == {"pass@1", "pass@2", "pass@4", "maj@1", "maj@2", "maj@4"}  # only k <= 6 samples
    assert metrics == _ours(ArithmeticTask(), generations, "3", (1, 2, 4))
    assert metrics["pass@1"] == pytest.approx(0.5)
    # the filter hands every generation of every document through unchanged
    assert utils.keep_all_samples([["a", "b"], ["c", "d"]], [{}, {}]) == [["a", "b"], ["c", "d"]]
    gsm = ["so \\boxed{12}", "#### 12", "It is 13", "no idea"]
    assert utils.process_results_gsm8k({"answer": "12"}, [gsm]) == _ours(GSM8KTask(), gsm, "12", (1, 2, 4))


def test_custom_datasets_take_their_knobs_and_ignore_other_metadata(monkeypatch):
    # lm-eval passes the YAML metadata, --metadata and the model args all together
    data = utils.arithmetic_dataset(version=1.0, pretrained="some/model", n=5, max_operands=3)["test"]
    assert data["prompt"] == ArithmeticTask(max_operands=3).load("test", 5)["prompt"]
    assert len(utils.arithmetic_dataset()["test"]) == 200
    monkeypatch.delenv(utils.GSM8K_DATA_ENV, raising=False)
    from_kwargs = utils.gsm8k_dataset(version=1.0, data_files=str(GSM8K_FILE), n=3)["test"]
    assert from_kwargs["answer"] == ["405", "108", "292"]
    monkeypatch.setenv(utils.GSM8K_DATA_ENV, str(GSM8K_FILE))
    assert len(utils.gsm8k_dataset()["test"]) == 8


# ---- lm-eval end to end on the embedded model -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def lm():
    from lm_eval.models.huggingface import HFLM
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(EMBEDDED_MODEL_DIR).eval()
    tokenizer = AutoTokenizer.from_pretrained(EMBEDDED_MODEL_DIR)
    return HFLM(pretrained=model, tokenizer=tokenizer, batch_size=64, device="cpu")


def _variant(tmp_path: Path, base: str, name: str, repeats: int) -> Path:
    """A task YAML that includes one of ours with fewer repeats (how a user makes a variant)."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"include: {TASKS_DIR / base}\ntask: {name}\nrepeats: {repeats}\n")
    return path


def _run(lm, tmp_path, base, name, repeats, limit, **kwargs):
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    _variant(tmp_path, base, name, repeats)
    manager = TaskManager(include_path=[str(TASKS_DIR), str(tmp_path)], metadata=kwargs.pop("metadata", None))
    return simple_evaluate(
        model=lm, tasks=[name], task_manager=manager, limit=limit, log_samples=True, bootstrap_iters=0, **kwargs
    )


def _check_against_our_functions(out, name, task, repeats, ks):
    samples = out["samples"][name]
    per_doc = {f"{m}@{k}": [] for m in ("pass", "maj") for k in ks}
    for sample in samples:
        (generations,) = sample["resps"]  # one request per document, holding all `repeats` generations
        assert len(generations) == repeats
        assert sample["filtered_resps"] == [generations]
        ours = _ours(task, generations, sample["doc"]["answer"], ks)
        for key, value in ours.items():
            assert sample[key] == value, (key, generations)  # exact, per document
            per_doc[key].append(value)
    results = out["results"][name]
    for key, values in per_doc.items():
        assert results[f"{key},all"] == sum(values) / len(values)  # lm-eval's mean of our per-document values
    return per_doc


def test_lm_eval_arithmetic_pass_and_maj_equal_our_functions_on_the_same_generations(lm, tmp_path):
    out = _run(lm, tmp_path, "grpo_ext_arithmetic.yaml", "grpo_ext_arithmetic_r4", 4, 8, metadata={"n": 8})
    per_doc = _check_against_our_functions(out, "grpo_ext_arithmetic_r4", ArithmeticTask(), 4, (1, 2, 4))
    assert len(per_doc["pass@1"]) == 8
    results = out["results"]["grpo_ext_arithmetic_r4"]
    assert "pass@8,all" not in results and "maj@16,all" not in results  # k > repeats is not reported
    # the trained embedded model solves some of them, so the comparison is not all zeros
    assert 0 < results["pass@4,all"] <= 1 and results["pass@1,all"] <= results["pass@4,all"]
    # the prompts are the embedded task's test prompts, sampled at temperature 1 until EOS
    config = out["configs"]["grpo_ext_arithmetic_r4"]
    assert config["generation_kwargs"]["temperature"] == 1.0 and config["generation_kwargs"]["do_sample"] is True
    assert [s["doc"]["prompt"] for s in out["samples"]["grpo_ext_arithmetic_r4"]] == ArithmeticTask().load("test", 8)[
        "prompt"
    ]


def test_lm_eval_gsm8k_runs_on_a_local_file(lm, tmp_path, monkeypatch):
    monkeypatch.setenv(utils.GSM8K_DATA_ENV, str(GSM8K_FILE))
    out = _run(lm, tmp_path, "grpo_ext_gsm8k.yaml", "grpo_ext_gsm8k_r2", 2, 2, gen_kwargs={"max_gen_toks": 8})
    _check_against_our_functions(out, "grpo_ext_gsm8k_r2", GSM8KTask(), 2, (1, 2))
    docs = [s["doc"] for s in out["samples"]["grpo_ext_gsm8k_r2"]]
    assert [d["answer"] for d in docs] == ["405", "108"]
    assert docs[0]["prompt"].endswith("Answer:")
