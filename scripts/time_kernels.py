"""Quick kernel timing for tuning: jax_camp's CUDA kernels against XLA on the
large shapes, pipelined calls, median of repeats. benchmarks/run_ops.py is the
full harness; this is the short loop used while trying kernel variants."""

from __future__ import annotations

import statistics
import sys
import time

import jax
import jax.numpy as jnp

import jax_camp

SHAPES = [(8192, 8192), (65536, 1024), (4096, 32768), (262144, 128), (1024, 262144)]
CALLS, REPEATS = 30, 5


def seconds_per_call(f, *args) -> float:
    jax.block_until_ready(f(*args))
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(CALLS):
            result = f(*args)
        jax.block_until_ready(result)
        times.append((time.perf_counter() - start) / CALLS)
    return statistics.median(times)


def softmax_grad(op):
    return jax.jit(jax.grad(lambda x, w: jnp.sum(op(x) * w)))


OPS = {
    # name: (make(backend) -> jitted f, bytes moved per element, needs w)
    "copy": (lambda b: jax.jit(lambda x: jax_camp.copy(x, backend=b)), 2),
    "vector_add": (lambda b: jax.jit(lambda x: jax_camp.vector_add(x, x, backend=b)), 3),
    "reduce_sum": (lambda b: jax.jit(lambda x: jax_camp.reduce_sum(x, backend=b)), 1),
    "softmax": (lambda b: jax.jit(lambda x: jax_camp.softmax(x, backend=b)), 2),
    "softmax_grad": (lambda b: softmax_grad(lambda x: jax_camp.softmax(x, backend=b)), 6),
}


def main() -> None:
    only = sys.argv[1:] or list(OPS)
    print(f"{'op':<13}{'shape':<15}{'dtype':<9}{'cuda us':>9}{'xla us':>9}{'TB/s':>7}{'x xla':>7}")
    for name in only:
        make, bytes_per_element = OPS[name]
        ours, theirs = make("cuda"), make("xla")
        for dtype in (jnp.float32, jnp.bfloat16):
            for shape in SHAPES:
                x = jax.random.normal(jax.random.key(0), shape, dtype)
                args = (x, x) if name == "softmax_grad" else (x,)
                t_ours, t_xla = seconds_per_call(ours, *args), seconds_per_call(theirs, *args)
                tbs = x.size * x.dtype.itemsize * bytes_per_element / t_ours / 1e12
                print(f"{name:<13}{str(shape):<15}{jnp.dtype(dtype).name:<9}"
                      f"{t_ours * 1e6:9.1f}{t_xla * 1e6:9.1f}{tbs:7.2f}{t_xla / t_ours:7.2f}")


if __name__ == "__main__":
    main()
