"""Data-parallel softmax and its gradient with jax_camp's kernels over all devices.

    python3 examples/sharded_softmax.py [--rows 32768 --cols 4096 --dtype float32]

The rows of a batch of logits are sharded over a 1-D mesh of every device;
each device runs the kernels on its own rows, forward and backward, with no
communication. The script checks the result against the same step on one
device and against jax.nn.softmax, checks that a mesh sharding the softmax
axis itself (each device holding a slice of every row) gives the same
answer, and times one device against all of them.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import jax_camp
from jax_camp.ops.softmax import SOFTMAX


def loss(x: jax.Array, weights: jax.Array, backend: str | None) -> jax.Array:
    return jnp.sum(jax_camp.softmax(x, backend=backend).astype(jnp.float32) * weights)


def make_step(backend: str | None):
    """softmax(x) and d loss / dx, in one jitted step."""

    def step(x, weights):
        return jax_camp.softmax(x, backend=backend), jax.grad(loss)(x, weights, backend)

    return jax.jit(step)


def per_call_seconds(step, x, weights, iters: int) -> float:
    """Seconds per step with calls queued back to back, as in a training loop:
    only the last one is waited for."""
    jax.block_until_ready(step(x, weights))
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(iters):
            out = step(x, weights)
        jax.block_until_ready(out)
        best = min(best, (time.perf_counter() - start) / iters)
    return best


def max_diff(a: jax.Array, b: jax.Array) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=32768)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--backend", default=None, help="jax_camp backend (default: the platform's)")
    args = parser.parse_args()

    devices = jax.devices()
    n = len(devices)
    rows = args.rows - args.rows % n
    dtype = jnp.dtype(args.dtype)
    print(f"jax {jax.__version__}, {n} x {devices[0].device_kind}, x: ({rows}, {args.cols}) {dtype}")

    kx, kt = jax.random.split(jax.random.key(0))
    x_host = (jax.random.normal(kx, (rows, args.cols), jnp.float32) * 3).astype(dtype)
    weights_host = jax.random.normal(kt, (rows, args.cols), jnp.float32)

    def mesh_of(devs):
        return jax.make_mesh((len(devs),), ("data",), axis_types=(AxisType.Auto,), devices=devs)

    one, every = mesh_of(devices[:1]), mesh_of(devices)
    step = make_step(args.backend)

    def put(mesh, spec):
        sharding = NamedSharding(mesh, spec)
        return jax.device_put(x_host, sharding), jax.device_put(weights_host, sharding)

    x1, w1 = put(one, P("data"))
    xn, wn = put(every, P("data"))
    y1, dx1 = step(x1, w1)
    yn, dxn = step(xn, wn)
    hlo = step.lower(xn, wn).compile().as_text()

    reference = jax.nn.softmax(x_host.astype(jnp.float32))
    tol = 1e-5 if dtype == jnp.float32 else 1e-2
    checks = {
        "softmax, all devices vs one": max_diff(yn, y1),
        "gradient, all devices vs one": max_diff(dxn, dx1),
        "softmax vs jax.nn.softmax": max_diff(y1, reference),
    }
    # The softmax axis itself split across devices: partial maxima and sums
    # are exchanged instead of gathering rows.
    xc, wc = put(every, P(None, "data"))
    yc, dxc = step(xc, wc)
    checks["softmax axis sharded vs one"] = max_diff(yc, y1)
    checks["gradient, softmax axis sharded vs one (rel.)"] = max_diff(dxc, dx1) / max(
        1.0, float(jnp.max(jnp.abs(dx1.astype(jnp.float32))))
    )
    for name, diff in checks.items():
        print(f"  {name:40s} max |diff| {diff:.3g}")
    print(f"  output sharding: softmax {yn.sharding.spec}, gradient {dxn.sharding.spec}")
    print(f"  data-parallel step: all-gather {'all-gather' in hlo}, "
          f"all-reduce {'all-reduce' in hlo}, jax_camp kernels {SOFTMAX.ffi_target in hlo}")
    ok = all(d <= tol for d in checks.values()) and "all-gather" not in hlo

    t_one = per_call_seconds(step, x1, w1, args.iters)
    t_all = per_call_seconds(step, xn, wn, args.iters)
    # softmax reads x, writes y; its backward reads y and the cotangent, writes dx.
    moved = 5 * rows * args.cols * dtype.itemsize
    print(f"  softmax + gradient, 1 device:  {t_one * 1e3:8.3f} ms/step  {moved / t_one / 1e9:7.1f} GB/s")
    print(f"  softmax + gradient, {n} devices: {t_all * 1e3:8.3f} ms/step  {moved / t_all / 1e9:7.1f} GB/s"
          f"  ({t_one / t_all:.2f}x)")
    print(f"SUMMARY: {'OK' if ok else 'MISMATCH'}; {n} device(s) {devices[0].device_kind}; "
          f"1 device {t_one * 1e3:.3f} ms, {n} devices {t_all * 1e3:.3f} ms, speedup {t_one / t_all:.2f}x")
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
