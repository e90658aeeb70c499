"""jax_camp.reduce_sum: sum along axes, accumulated in float32."""

from __future__ import annotations

import functools
import math
from typing import Callable

import jax
import jax.numpy as jnp
from jax.interpreters import ad

from jax_camp import backends, registration
from jax_camp.ops import _checks
from jax_camp.ops._spec import OpSpec


def _sum_across_devices(local: Callable[..., jax.Array], axes, x: jax.Array) -> jax.Array:
    """Rows split over the devices of mesh ``axes``: each block's partial sums, added in float32."""
    partial_sums = local(x).astype(jnp.float32)
    return jax.lax.psum(partial_sums, axes).astype(x.dtype)


# The kernel sums each row of its operand's last dim.
REDUCE_SUM = registration.register(OpSpec(
    name="reduce_sum", arity=1, tilelang_module="reduce_sum", along_rows=True,
    drops_last_dim=True, combine_across_devices=_sum_across_devices,
))


def reduce_sum(
    x: jax.typing.ArrayLike,
    axis: int | tuple[int, ...] | None = -1,
    *,
    keepdims: bool = False,
    backend: str | None = None,
) -> jax.Array:
    """Sum of ``x`` over ``axis``, as ``jnp.sum``, but for the default axis.

    Args:
      x: a float32, bfloat16 or float16 array.
      axis: an int, a tuple of ints, or None for every axis. The default is the last
        axis (a row sum), where ``jnp.sum``'s is every axis.
      keepdims: keep the reduced axes as dims of size one.
      backend: None (the platform's kernels), "cuda", "cpu", "tilelang" or
        "xla"; see ``jax_camp.backends``.

    Returns:
      An array of ``x``'s dtype. The sum is accumulated in float32 in a fixed
      order, so it is bitwise the same from run to run.
    """
    backend = backends.resolve(backend)
    x = _checks.float_array("reduce_sum", "x", x)
    axes = _checks.normalize_axes("reduce_sum", axis, x.ndim)
    _checks.require_static("reduce_sum", "keepdims", keepdims)
    return _reduce_sum(x, axes, bool(keepdims), backend)


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _reduce_sum(x: jax.Array, axes: tuple[int, ...], keepdims: bool, backend: str) -> jax.Array:
    if not backends.uses_kernels(backend):
        return jnp.sum(x, axis=axes, keepdims=keepdims)
    out_shape = tuple(1 if d in axes else n for d, n in enumerate(x.shape) if keepdims or d not in axes)
    kept_size = math.prod(n for d, n in enumerate(x.shape) if d not in axes)
    if kept_size == 0:
        return jnp.empty(out_shape, x.dtype)
    if x.size == 0:
        return jnp.zeros(out_shape, x.dtype)
    rows = _checks.move_to_last(x, axes)
    return backends.kernel_call(REDUCE_SUM, backend, rows).reshape(out_shape)


def _reduce_sum_transpose(ct: jax.Array, x, *, backend: str) -> list[jax.Array]:
    # Sharded as x is, its summed dim too: under a mesh of Explicit axes the type says so.
    return [jnp.broadcast_to(ct[..., None], x.aval.shape, out_sharding=x.aval.sharding)]


# The sum is linear: its tangent is the sum of the tangent (by the kernel), and each row's
# cotangent spreads over the row.
ad.deflinear2(backends.primitive(REDUCE_SUM), _reduce_sum_transpose)
