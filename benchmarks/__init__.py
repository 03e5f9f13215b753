"""Side-by-side performance benchmarks (`python -m benchmarks.<name>`; `python -m benchmarks.run_all` for all).

Importing the package pins one thread per process and the offline hub before torch is imported by any benchmark
module: on 2 shared cores, thread contention makes timings swing by 100x.
"""

import os

for _name, _value in (
    ("OMP_NUM_THREADS", "1"),
    ("MKL_NUM_THREADS", "1"),
    ("HF_HUB_OFFLINE", "1"),
    ("TOKENIZERS_PARALLELISM", "false"),
    ("TRANSFORMERS_VERBOSITY", "error"),
):
    os.environ.setdefault(_name, _value)
