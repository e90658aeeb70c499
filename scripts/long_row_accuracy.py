"""Prints each backend's largest relative error on rows of millions of values, beside XLA's.

    python3 -P scripts/long_row_accuracy.py cuda tilelang      (from the repository root)

The rows are tests/test_long_row_sums.py's, at its lengths and at 2^25: reduce_sum of rows of
0.1; softmax and log_softmax of `long_row`, and their VJPs along a cotangent of 0.1 and 1.0
alternating, each against float64 (ours from its own output y, as the test measures it). The
test holds each error to 4 times XLA's; this prints the numbers docs/accuracy.md quotes.
"""

import functools
import sys

sys.path.insert(0, "tests")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import jax_camp  # noqa: E402
from helpers import LOG_SOFTMAX_OP, SOFTMAX_OP, f64  # noqa: E402
from test_long_row_sums import ROW_LENGTHS, long_row, relative_error  # noqa: E402


def errors(backend: str, n: int) -> str:
    x = jnp.full((2, n), 0.1, jnp.float32)
    exact = f64(x).sum(axis=-1)
    parts = [f"reduce_sum {relative_error(jax_camp.reduce_sum(x, backend=backend), exact):.1e} "
             f"(jnp {relative_error(jnp.sum(x, axis=-1), exact):.1e})"]
    x = long_row(n)
    v = jnp.full_like(x, 0.1).at[0, 1::2].set(1.0)
    for op in (SOFTMAX_OP, LOG_SOFTMAX_OP):
        fn = functools.partial(op.fn, backend=backend)
        exact = op.reference(x)
        ours_vjp, xla_vjp = (jax.vjp(f, x)[1](v)[0] for f in (fn, op.jax_fn))
        parts += [f"{op.fn.__name__} {relative_error(fn(x), exact):.1e} "
                  f"(jax.nn {relative_error(op.jax_fn(x), exact):.1e})",
                  f"vjp {relative_error(ours_vjp, op.vjp(f64(fn(x)), f64(v))):.1e} "
                  f"(jax.nn {relative_error(xla_vjp, op.vjp(exact, f64(v))):.1e})"]
    return "; ".join(parts)


if __name__ == "__main__":
    for backend in sys.argv[1:] or ["cpu"]:
        for n in ROW_LENGTHS + [2**25]:
            print(f"{backend} n={n}: {errors(backend, n)}", flush=True)
