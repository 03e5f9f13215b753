from grpo_ext.cli import run_cli
from grpo_ext.methods.study.signal.cli import main

run_cli(main)
