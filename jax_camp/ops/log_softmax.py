"""jax_camp.log_softmax: log_softmax along an axis, with where='s mask, and its own backward and
tangent kernels."""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from jax_camp import backends, registration
from jax_camp.ops._spec import OpSpec
from jax_camp.ops.softmax import SOFTMAX, masked_across_devices, normalize_along


# Rows split over the devices of mesh ``axes`` (this function and the next two): ``local`` runs
# the kernel on this device's block of each row, and per-row corrections, computed in float32,
# make the whole rows' answer. The collectives move one value per row, not the rows themselves.
def _log_softmax_across_devices(local: Callable[..., jax.Array], axes, x: jax.Array) -> jax.Array:
    y = local(x).astype(jnp.float32)
    block_max = jnp.max(x, axis=-1, keepdims=True).astype(jnp.float32)
    row_max = jax.lax.pmax(block_max, axes)
    # The block's log_softmax is x - block_lse and peaks at block_max - block_lse, so its
    # max gives the block's log-sum-exp: no second pass over x.
    empty = block_max == -jnp.inf
    block_lse = block_max - jnp.max(y, axis=-1, keepdims=True)
    share = jnp.where(empty, 0.0, jnp.exp(jnp.where(empty, 0.0, block_lse - row_max)))
    row_lse = row_max + jnp.log(jax.lax.psum(share, axes))
    # A block of -inf logits has a NaN local answer; its true one is x - row_lse: -inf, or
    # NaN if the whole row is -inf, as unsharded.
    whole = jnp.where(empty, x.astype(jnp.float32) - row_lse, y + (block_lse - row_lse))
    return whole.astype(x.dtype)


def _log_softmax_backward_across_devices(
    local: Callable[..., jax.Array], axes, y: jax.Array, g: jax.Array
) -> jax.Array:
    # The kernel gives g - exp(y) * block_sum; the answer is g - exp(y) * row_sum.
    dx = local(y, g)
    block_sum = jnp.sum(g.astype(jnp.float32), axis=-1, keepdims=True)
    row_sum = jax.lax.psum(block_sum, axes)
    correction = jnp.exp(y.astype(jnp.float32)) * (block_sum - row_sum)
    return (dx.astype(jnp.float32) + correction).astype(y.dtype)


def _log_softmax_tangent_across_devices(
    local: Callable[..., jax.Array], axes, y: jax.Array, t: jax.Array
) -> jax.Array:
    # The kernel gives t - block_dot; the answer is t - row_dot.
    dy = local(y, t)
    block_dot = jnp.sum(jnp.exp(y.astype(jnp.float32)) * t.astype(jnp.float32), axis=-1,
                        keepdims=True)
    row_dot = jax.lax.psum(block_dot, axes)
    return (dy.astype(jnp.float32) + (block_dot - row_dot)).astype(y.dtype)


# The forward kernel: y = x - max - log(sum(exp(x - max))) along each row. It is softmax's
# forward with another output, so it has softmax's scratch row counter.
LOG_SOFTMAX = registration.register(OpSpec(
    name="log_softmax", arity=1, tilelang_module="log_softmax", along_rows=True,
    combine_across_devices=_log_softmax_across_devices, scratch_results=SOFTMAX.scratch_results,
))

# The forward kernel with where='s mask: masked-out elements take no part in their row and
# come out -inf.
LOG_SOFTMAX_MASKED = registration.register(OpSpec(
    name="log_softmax_masked", arity=2, tilelang_module="log_softmax", along_rows=True,
    mask_operand=True,
    combine_across_devices=masked_across_devices(_log_softmax_across_devices, -jnp.inf),
))

# Reverse mode: dx = g - exp(y) * sum(g) along each row, from the forward's output y and the
# cotangent g.
LOG_SOFTMAX_BACKWARD = registration.register(OpSpec(
    name="log_softmax_backward", arity=2, tilelang_module="log_softmax", along_rows=True,
    combine_across_devices=_log_softmax_backward_across_devices,
))

# Forward mode: dy = t - sum(exp(y) * t) along each row, from the forward's output y and the
# tangent t. The Jacobian, I - 1 softmax^T, is not symmetric, so this is not the backward.
LOG_SOFTMAX_TANGENT = registration.register(OpSpec(
    name="log_softmax_tangent", arity=2, tilelang_module="log_softmax", along_rows=True,
    combine_across_devices=_log_softmax_tangent_across_devices,
))


def log_softmax(
    x: jax.typing.ArrayLike,
    axis: int | tuple[int, ...] | None = -1,
    where: jax.typing.ArrayLike | None = None,
    *,
    backend: str | None = None,
) -> jax.Array:
    """Log-softmax of ``x`` along ``axis``, as ``jax.nn.log_softmax``.

    ``x - max - log(sum(exp(x - max)))``, computed from x itself: a log-probability far
    below the smallest float32 exp (-1000, say) stays exact and finite, where
    ``log(softmax(x))`` would give -inf.

    Args:
      x: a float32, bfloat16 or float16 array.
      axis: the axis, or tuple of axes, to normalize over (negative allowed);
        None normalizes over every axis.
      where: elements to include, a boolean array that broadcasts to ``x``'s shape: the
        others take no part in their row and come out -inf; a row with none included is all
        -inf. The kernels read it with x, in the same pass.
      backend: None (the platform's kernels), "cuda", "cpu", "tilelang" or
        "xla"; see ``jax_camp.backends``.

    Returns:
      An array of ``x``'s shape and dtype. Differentiable in both modes and to any order:
      reverse mode's ``dx = g - exp(y) * sum(g)`` and forward mode's tangent
      ``t - sum(exp(y) * t)`` are kernels of the forward's output, nothing recomputed.
    """
    return normalize_along(LOG_SOFTMAX, LOG_SOFTMAX_MASKED, jax.nn.log_softmax, x, axis, where,
                           backend)


# Derivative rules. The tangent and backward kernels are linear in their second operand and
# each other's transpose (J t and J^T g for J = I - 1 softmax^T); their derivatives in y,
# needed only for second-order derivatives, are plain JAX.
_log_softmax_p = backends.primitive(LOG_SOFTMAX)
_masked_p = backends.primitive(LOG_SOFTMAX_MASKED)
_backward_p = backends.primitive(LOG_SOFTMAX_BACKWARD)
_tangent_p = backends.primitive(LOG_SOFTMAX_TANGENT)


def _backward_jvp_in_y(dy: jax.Array, y: jax.Array, g: jax.Array, *, backend: str) -> jax.Array:
    # d/dy of g - exp(y) * sum(g) along dy: -exp(y) * dy * sum(g).
    y32, g32, dy32 = (v.astype(jnp.float32) for v in (y, g, dy))
    return (-jnp.exp(y32) * dy32 * jnp.sum(g32, axis=-1, keepdims=True)).astype(y.dtype)


def _tangent_jvp_in_y(dy: jax.Array, y: jax.Array, t: jax.Array, *, backend: str) -> jax.Array:
    # d/dy of t - sum(exp(y) * t) along dy: -sum(exp(y) * dy * t), the same for every column.
    y32, t32, dy32 = (v.astype(jnp.float32) for v in (y, t, dy))
    d_dot = jnp.sum(jnp.exp(y32) * dy32 * t32, axis=-1, keepdims=True)
    return jnp.broadcast_to(-d_dot, y.shape).astype(y.dtype)


def _masked_tangent(dy: jax.Array, mask: jax.Array) -> jax.Array:
    # A masked-out y is -inf whatever x is: its tangent is 0, where the kernel's t - sum(...)
    # is not. The select transposes to the same select of the cotangent before the backward
    # kernel, which then leaves masked-out elements out of sum(g) and gives them 0.
    return jnp.where(mask, dy, jnp.zeros_like(dy))


backends.def_jvp_from_output(_log_softmax_p, _tangent_p)
backends.def_jvp_from_output(_masked_p, _tangent_p, _masked_tangent)
backends.def_linear_in_second(_backward_p, _backward_jvp_in_y, _tangent_p)
backends.def_linear_in_second(_tangent_p, _tangent_jvp_in_y, _backward_p)
