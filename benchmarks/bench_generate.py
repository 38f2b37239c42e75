"""Plain transformers against intelrt, side by side in one process (issue 6).

    python benchmarks/bench_generate.py            # Qwen3-0.6B-shaped, random bf16 weights, on cuda
    python benchmarks/bench_generate.py --tiny     # tiny model, on the CPU in a few seconds
    intelrt bench --chart bench.png                # the same, plus a PNG bar chart

Prints tok/s for batch 1 (eager generate, static cache + compile, intelrt), for 64 requests x
256 new tokens (padded generate, generate_batch with defaults, intelrt), load wall time of
intelrt.load against from_pretrained with the same choices, whether the outputs match, and
whether issue 6's targets are met. No download: the model is built from its config.
"""

from __future__ import annotations

import sys

from intelrt.cli import main

if __name__ == "__main__":  # `intelrt -v bench ...`: the same options, errors and output, progress logged
    sys.exit(main(["-v", "bench", *sys.argv[1:]]))
