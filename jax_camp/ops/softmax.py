"""jax_camp.softmax: softmax along an axis, with its own fused backward kernel."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jax_camp import backends
from jax_camp.ops import _checks


def softmax(
    x: jax.typing.ArrayLike,
    axis: int | tuple[int, ...] = -1,
    *,
    backend: str | None = None,
) -> jax.Array:
    """Softmax of ``x`` along ``axis``, as ``jax.nn.softmax``.

    Args:
      x: a float32, bfloat16 or float16 array.
      axis: the axis, or tuple of axes, to normalize over (negative allowed).
      backend: None (the platform's kernels), "cuda", "cpu", "tilelang" or
        "xla"; see ``jax_camp.backends``.

    Returns:
      An array of ``x``'s shape and dtype. Differentiable: the backward is
      ``dx = y * (g - sum(g * y))``, a single kernel that reuses the forward's
      output instead of recomputing it.
    """
    backend = backends.resolve(backend)
    x = _checks.float_array("softmax", "x", x)
    axes = _checks.normalize_axes("softmax", axis, x.ndim, allow_none=False)
    return _softmax(x, axes, backend)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _softmax(x: jax.Array, axes: tuple[int, ...], backend: str) -> jax.Array:
    if not backends.uses_kernels(backend):
        return jax.nn.softmax(x, axis=axes)
    if x.size == 0:
        return jnp.empty_like(x)
    rows = _checks.move_to_last(x, axes)
    return _checks.restore_from_last(_softmax_last_axis(rows, backend), x.shape, axes)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _softmax_last_axis(x: jax.Array, backend: str) -> jax.Array:
    return backends.kernel_call("softmax", backend, jax.ShapeDtypeStruct(x.shape, x.dtype), x)


def _forward(x: jax.Array, backend: str) -> tuple[jax.Array, jax.Array]:
    y = _softmax_last_axis(x, backend)
    return y, y


def _backward(backend: str, y: jax.Array, g: jax.Array) -> tuple[jax.Array]:
    result = jax.ShapeDtypeStruct(y.shape, y.dtype)
    return (backends.kernel_call("softmax_backward", backend, result, y, g.astype(y.dtype)),)


_softmax_last_axis.defvjp(_forward, _backward)
