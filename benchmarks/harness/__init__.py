"""The harness behind benchmarks/run_ops.py.

cases (ops, shapes, inputs), checks (test mode), sampling and timing (the pipelined headline
figure and the copy ceiling), trace (device time from a profiler trace), crosscheck (torch's
CUDA events and the profiler against the harness), verdict (plausibility and the tie rule),
report (table, summary, JSON), plot (PNG) and runner (the run itself).

`sampling` needs only the standard library, so that the torch cross-check's child process
times with the same code without importing JAX.
"""
