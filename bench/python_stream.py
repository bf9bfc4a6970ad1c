"""Streams a greedy generation through the Python bindings and reports tokens/s by the wall clock
of the whole loop (as bench/capi_stream.c does for the C API; scripts/bindings-bench.sh).
Usage: python_stream.py MODEL [N_TOKENS=256] [REPS=5] [THREADS=2]"""
import json
import sys
import time

import pocket

path = sys.argv[1]
n_tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 256
reps = int(sys.argv[3]) if len(sys.argv) > 3 else 5
threads = int(sys.argv[4]) if len(sys.argv) > 4 else 2
with pocket.Model.load(path, threads=threads) as model:
    session = model.session()
    list(session.stream("Once upon a time", max_tokens=32, temperature=0))  # warm-up, unreported
    for _ in range(reps):
        session.reset()
        t0 = time.perf_counter()
        n_bytes = 0
        for piece in session.stream("Once upon a time", max_tokens=n_tokens, temperature=0):
            n_bytes += len(piece)
        s = time.perf_counter() - t0
        n = session.last_result.n_generated_tokens
        print(json.dumps({"api": "python", "tokens": n, "seconds": round(s, 6),
                          "tokens_per_s": round(n / s, 3)}), flush=True)
