"""jax_camp.softmax: softmax along an axis, with where='s mask, and its own fused backward."""

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


def masked_across_devices(combine, masked_value: float):
    """``combine`` of a kernel without a mask, for its kernel with ``where=``'s mask: the
    blocks' masked-out values are -inf to the rows' max and sum, and their answer is
    ``masked_value``."""

    def combine_masked(local: Callable[..., jax.Array], axes, x: jax.Array,
                       mask: jax.Array) -> jax.Array:
        whole = combine(lambda v: local(v, mask), axes, jnp.where(mask, x, -jnp.inf))
        return jnp.where(mask, whole, masked_value).astype(x.dtype)

    return combine_masked


# What a symbolic dim (a shape-polymorphic jax.export) counts as in row_counter: it may take
# any size, up to the largest.
_LARGEST_DIM = 2**63 - 1


def row_counter(shape: tuple[int, ...]) -> tuple[jax.ShapeDtypeStruct, ...]:
    """The unmasked forward's scratch for operands of ``shape``: a row counter where the
    long-row CUDA kernel's thread-block clusters may claim rows on one (RowCounter,
    csrc/common/row_team.cuh), else none, since XLA allocates each result with its call.
    Being the call's own, it is never shared by calls in flight at once.

    A symbolic dim (a shape-polymorphic ``jax.export``) counts as the largest a shape can
    have: the call then brings the counter wherever some size of that dim needs it, and
    the kernels use it only where the shape the program runs with does."""
    def known(dim) -> int:
        return dim if isinstance(dim, int) else _LARGEST_DIM

    if registration.needs_row_counter(known(math.prod(shape[:-1])), known(shape[-1])):
        return (jax.ShapeDtypeStruct((1,), jnp.uint32),)
    return ()


# The forward kernel normalizes each row of its operand's last dim.
SOFTMAX = registration.register(OpSpec(
    name="softmax", arity=1, tilelang_module="softmax", along_rows=True,
    combine_across_devices=_softmax_across_devices, scratch_results=row_counter,
))

# The forward kernel with where='s mask: masked-out elements take no part in their row and
# come out 0. Its kernels never claim rows, so it has no scratch.
SOFTMAX_MASKED = registration.register(OpSpec(
    name="softmax_masked", arity=2, tilelang_module="softmax", along_rows=True, mask_operand=True,
    combine_across_devices=masked_across_devices(_softmax_across_devices, 0.0),
))

# The backward kernel: dx = y * (g - sum(g * y)) along each row, from the
# forward's output y and the cotangent g.
SOFTMAX_BACKWARD = registration.register(OpSpec(
    name="softmax_backward", arity=2, tilelang_module="softmax", along_rows=True,
    combine_across_devices=_softmax_backward_across_devices,
))


def softmax(
    x: jax.typing.ArrayLike,
    axis: int | tuple[int, ...] | None = -1,
    where: jax.typing.ArrayLike | None = None,
    *,
    backend: str | None = None,
) -> jax.Array:
    """Softmax of ``x`` along ``axis``, as ``jax.nn.softmax``.

    Args:
      x: a float32, bfloat16 or float16 array.
      axis: the axis, or tuple of axes, to normalize over (negative allowed);
        None normalizes over every axis.
      where: elements to include, a boolean array that broadcasts to ``x``'s shape: the
        others take no part in their row and come out 0; a row with none included is all
        0. The kernels read it with x, in the same pass.
      backend: None (the platform's kernels), "cuda", "cpu", "tilelang" or
        "xla"; see ``jax_camp.backends``.

    Returns:
      An array of ``x``'s shape and dtype. Differentiable in both modes and to any order:
      reverse mode's ``dx = y * (g - sum(g * y))`` and forward mode's tangent
      ``y * (t - sum(y * t))`` are one kernel that reuses the forward's output instead of
      recomputing it.
    """
    return normalize_along(SOFTMAX, SOFTMAX_MASKED, jax.nn.softmax, x, axis, where, backend)


def normalize_along(
    spec: OpSpec,
    masked_spec: OpSpec,
    reference: Callable[..., jax.Array],
    x: jax.typing.ArrayLike,
    axis: int | tuple[int, ...] | None,
    where: jax.typing.ArrayLike | None,
    backend: str | None,
) -> jax.Array:
    """softmax's and log_softmax's public path: their checks, then the kernel ``spec`` (or
    ``masked_spec`` with ``where``'s mask) over ``axis`` (moved last, as the kernels normalize
    rows), or ``reference`` (jax.nn's) on the "xla" backend."""
    backend = backends.resolve(backend)
    x = _checks.float_array(spec.name, "x", x)
    axes = _checks.normalize_axes(spec.name, axis, x.ndim)
    mask = None if where is None else _checks.where_mask(spec.name, where, x.shape)
    return _normalize_along(spec, masked_spec, reference, x, mask, axes, backend)


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 5, 6))
def _normalize_along(spec: OpSpec, masked_spec: OpSpec, reference, x: jax.Array,
                     mask: jax.Array | None, axes: tuple[int, ...], backend: str) -> jax.Array:
    if not backends.uses_kernels(backend):
        return reference(x, axis=axes, where=mask)
    if x.size == 0:
        return jnp.empty_like(x)
    rows = _checks.move_to_last(x, axes)
    if mask is None:
        out = backends.kernel_call(spec, backend, rows)
    else:
        out = backends.kernel_call(masked_spec, backend, rows, _checks.move_to_last(mask, axes))
    return _checks.restore_from_last(out, x.shape, axes)


# Derivative rules. softmax's Jacobian, diag(y) - y y^T, is symmetric, so one map serves
# forward mode (tangent t -> y * (t - sum(y * t))) and reverse mode (cotangent g -> the same
# of g): the backward kernel, from the forward's output y, nothing recomputed. The backward
# kernel is linear in its second operand, so its transpose is itself; its derivative in y,
# needed only for second-order derivatives, is plain JAX.
_softmax_p = backends.primitive(SOFTMAX)
_masked_p = backends.primitive(SOFTMAX_MASKED)
_backward_p = backends.primitive(SOFTMAX_BACKWARD)


def _backward_jvp_in_y(dy: jax.Array, y: jax.Array, g: jax.Array, *, backend: str) -> jax.Array:
    # d/dy of y * (g - sum(y * g)) along dy: dy * (g - sum(y * g)) - y * sum(dy * g).
    y32, g32, dy32 = (v.astype(jnp.float32) for v in (y, g, dy))
    dot = jnp.sum(y32 * g32, axis=-1, keepdims=True)
    d_dot = jnp.sum(dy32 * g32, axis=-1, keepdims=True)
    return (dy32 * (g32 - dot) - y32 * d_dot).astype(y.dtype)


backends.def_jvp_from_output(_softmax_p, _backward_p)
# With where=, y is 0 where the mask drops x, and so is the same tangent there.
backends.def_jvp_from_output(_masked_p, _backward_p)
# The backward kernel is linear in g; as the Jacobian is symmetric, it is its own transpose.
backends.def_linear_in_second(_backward_p, _backward_jvp_in_y, _backward_p)
