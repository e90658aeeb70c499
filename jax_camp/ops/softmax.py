"""jax_camp.softmax: softmax along an axis, with its own fused backward kernel."""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp
from jax.interpreters import ad

from jax_camp import backends, registration
from jax_camp.ops import _checks
from jax_camp.ops._spec import OpSpec

# Rows split over the devices of mesh ``axes`` (this function and the next):
# ``local`` runs the kernel on this device's block of each row, and per-row
# corrections, computed in float32, make the whole rows' answer. The
# collectives move one value per row, not the rows themselves.
def _softmax_across_devices(local: Callable[..., jax.Array], axes, x: jax.Array) -> jax.Array:
    y = local(x)
    block_max = jnp.max(x, axis=-1, keepdims=True).astype(jnp.float32)
    row_max = jax.lax.pmax(block_max, axes)
    # The block's softmax is exp(x - block_max) / block_sum and peaks at
    # exp(0) / block_sum, so its max is 1 / block_sum: no second pass over x.
    inv_block_sum = jnp.max(y, axis=-1, keepdims=True).astype(jnp.float32)
    empty = block_max == -jnp.inf
    share = jnp.where(empty, 0.0, jnp.exp(block_max - row_max) / inv_block_sum)
    row_sum = jax.lax.psum(share, axes)
    rescaled = y.astype(jnp.float32) * (share / row_sum)
    # A block of -inf logits has a NaN local softmax; its true share is
    # exp(-inf - row_max) / row_sum: 0, or NaN if the whole row is -inf,
    # as unsharded.
    return jnp.where(empty, jnp.exp(x - row_max) / row_sum, rescaled).astype(x.dtype)


def _softmax_backward_across_devices(
    local: Callable[..., jax.Array], axes, y: jax.Array, g: jax.Array
) -> jax.Array:
    # The kernel gives y * (g - block_dot); the answer is y * (g - row_dot).
    dx = local(y, g)
    block_dot = jnp.sum(y.astype(jnp.float32) * g.astype(jnp.float32), axis=-1, keepdims=True)
    row_dot = jax.lax.psum(block_dot, axes)
    return (dx.astype(jnp.float32) + y.astype(jnp.float32) * (block_dot - row_dot)).astype(y.dtype)


# The forward kernel normalizes each row of its operand's last dim.
SOFTMAX = OpSpec(
    name="softmax",
    arity=1,
    sharding_rule="... i -> ... i",
    tilelang_module="softmax",
    along_rows=True,
    combine_across_devices=_softmax_across_devices,
    # A row counter, where the long-row CUDA kernel counts the rows its
    # thread-block clusters claim (RowCounter, csrc/common/row_team.cuh).
    # XLA allocates it with the call, so calls in flight at once never share one.
    scratch_results=(jax.ShapeDtypeStruct((1,), jnp.uint32),),
)
registration.register(SOFTMAX)

# The backward kernel: dx = y * (g - sum(g * y)) along each row, from the
# forward's output y and the cotangent g.
SOFTMAX_BACKWARD = OpSpec(
    name="softmax_backward",
    arity=2,
    sharding_rule="... i, ... i -> ... i",
    tilelang_module="softmax",
    along_rows=True,
    combine_across_devices=_softmax_backward_across_devices,
)
registration.register(SOFTMAX_BACKWARD)


def softmax(
    x: jax.typing.ArrayLike,
    axis: int | tuple[int, ...] | None = -1,
    *,
    backend: str | None = None,
) -> jax.Array:
    """Softmax of ``x`` along ``axis``, as ``jax.nn.softmax``.

    Args:
      x: a float32, bfloat16 or float16 array.
      axis: the axis, or tuple of axes, to normalize over (negative allowed);
        None normalizes over every axis.
      backend: None (the platform's kernels), "cuda", "cpu", "tilelang" or
        "xla"; see ``jax_camp.backends``.

    Returns:
      An array of ``x``'s shape and dtype. Differentiable in both modes and to any order:
      reverse mode's ``dx = y * (g - sum(g * y))`` and forward mode's tangent
      ``y * (t - sum(y * t))`` are one kernel that reuses the forward's output instead of
      recomputing it.
    """
    return normalize_along(SOFTMAX, jax.nn.softmax, x, axis, backend)


def normalize_along(
    spec: OpSpec,
    reference: Callable[..., jax.Array],
    x: jax.typing.ArrayLike,
    axis: int | tuple[int, ...] | None,
    backend: str | None,
) -> jax.Array:
    """softmax's and log_softmax's public path: their checks, then the kernel ``spec``
    over ``axis`` (moved last, as the kernels normalize rows), or ``reference`` (jax.nn's)
    on the "xla" backend."""
    backend = backends.resolve(backend)
    x = _checks.float_array(spec.name, "x", x)
    axes = _checks.normalize_axes(spec.name, axis, x.ndim)
    return _normalize_along(spec, reference, x, axes, backend)


@functools.partial(jax.jit, static_argnums=(0, 1, 3, 4))
def _normalize_along(spec: OpSpec, reference, x: jax.Array, axes: tuple[int, ...],
                     backend: str) -> jax.Array:
    if not backends.uses_kernels(backend):
        return reference(x, axis=axes)
    if x.size == 0:
        return jnp.empty_like(x)
    rows = _checks.move_to_last(x, axes)
    return _checks.restore_from_last(backends.kernel_call(spec, backend, rows), x.shape, axes)


# Derivative rules. softmax's Jacobian, diag(y) - y y^T, is symmetric, so one map serves
# forward mode (tangent t -> y * (t - sum(y * t))) and reverse mode (cotangent g -> the same
# of g): the backward kernel, from the forward's output y, nothing recomputed. The backward
# kernel is linear in its second operand, so its transpose is itself; its derivative in y,
# needed only for second-order derivatives, is plain JAX.
_softmax_p = backends.primitive(SOFTMAX)
_backward_p = backends.primitive(SOFTMAX_BACKWARD)


def _backward_jvp_in_y(dy: jax.Array, y: jax.Array, g: jax.Array, *, backend: str) -> jax.Array:
    # d/dy of y * (g - sum(y * g)) along dy: dy * (g - sum(y * g)) - y * sum(dy * g).
    y32, g32, dy32 = (v.astype(jnp.float32) for v in (y, g, dy))
    dot = jnp.sum(y32 * g32, axis=-1, keepdims=True)
    d_dot = jnp.sum(dy32 * g32, axis=-1, keepdims=True)
    return (dy32 * (g32 - dot) - y32 * d_dot).astype(y.dtype)


backends.def_jvp_from_output(_softmax_p, _backward_p)
# The backward kernel is linear in g; as the Jacobian is symmetric, it is its own transpose.
backends.def_linear_in_second(_backward_p, _backward_jvp_in_y, _backward_p)
