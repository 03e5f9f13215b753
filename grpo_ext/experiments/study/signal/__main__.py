from grpo_ext.cli import run_cli
from grpo_ext.experiments.study.signal.cli import main

run_cli(main)
