"""Runs jax_camp's kernels on sharded arrays without gathering them.

XLA cannot see inside a custom call, so by default its SPMD partitioner
gathers a custom call's operands whole onto every device and computes the
full result everywhere. ``partitioned_call`` wraps a kernel call in
``jax.experimental.custom_partitioning`` instead:

* a Shardy sharding rule (``"... i -> ... i"`` for softmax, ``"... i -> ..."``
  with ``i`` a reduction factor for reduce_sum, ``"... -> ..."`` for copy)
  lets sharding propagate through the call, and
* a ``partition`` callback (also used under the older GSPMD partitioner,
  together with ``infer_sharding_from_operands``) runs the kernel on each
  device's block. When the reduced (last) dim is sharded, the blocks' results
  are combined with small collectives over that dim's mesh axes: reduce_sum
  adds partial sums (psum); softmax and its backward exchange per-row max and
  sum (pmax, psum) and rescale each block; the data itself never moves.

On one device, in ``shard_map`` (every mesh axis manual) and under ``pmap``,
custom_partitioning lowers to the plain kernel call.

custom_partitioning has no batching rule, so ``jax.custom_batching.custom_vmap``
supplies one: the kernels treat leading dims as independent rows, so a vmapped
call is the same kernel call with the batch dim in front.
"""

from __future__ import annotations

import functools
import math
from typing import Callable

import jax
import jax.numpy as jnp
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding, PartitionSpec

# Runs a kernel on (per-device) arrays: ``kernel(op, backend, result, *operands)``.
Kernel = Callable[..., jax.Array]

# Shardy sharding rules; "i" is the reduced (last) dim.
_RULES: dict[str, tuple[str, dict[str, tuple[str, ...]]]] = {
    "copy": ("... -> ...", {}),
    "vector_add": ("..., ... -> ...", {}),
    "reduce_sum": ("... i -> ...", {"reduction_factors": ("i",)}),
    "softmax": ("... i -> ... i", {}),
    "softmax_backward": ("... i, ... i -> ... i", {}),
}


def partitioned_call(
    kernel: Kernel, op: str, backend: str, result: jax.ShapeDtypeStruct, *operands: jax.Array
) -> jax.Array:
    """``kernel(op, backend, result, *operands)``, partitioned along the
    operands' sharding under ``jax.jit`` and batched as rows under ``jax.vmap``."""

    @jax.custom_batching.custom_vmap
    def call(*xs: jax.Array) -> jax.Array:
        return _partitioned(kernel, op, backend, result, *xs)

    @call.def_vmap
    def _batched(
        axis_size: int, in_batched: list[bool], *xs: jax.Array
    ) -> tuple[jax.Array, bool]:
        xs = tuple(
            x if batched else jnp.broadcast_to(x, (axis_size, *x.shape))
            for x, batched in zip(xs, in_batched)
        )
        rows = jax.ShapeDtypeStruct((axis_size, *result.shape), result.dtype)
        return partitioned_call(kernel, op, backend, rows, *xs), True

    return call(*operands)


@functools.partial(custom_partitioning, static_argnums=(0, 1, 2, 3))
def _partitioned(
    kernel: Kernel, op: str, backend: str, result: jax.ShapeDtypeStruct, *operands: jax.Array
) -> jax.Array:
    return kernel(op, backend, result, *operands)


def _spec(shape: jax.ShapeDtypeStruct) -> tuple:
    """``shape``'s partition spec with one entry per dim."""
    sharding = shape.sharding
    if not isinstance(sharding, NamedSharding):
        # Only a mesh names the axes that the collectives run over. The
        # partitioner gives none in a shard_map over only some mesh axes.
        raise NotImplementedError(
            f"jax_camp: cannot partition a kernel whose operand sharding names no mesh "
            f"axes ({sharding}); inside shard_map, make every mesh axis manual"
        )
    spec = tuple(sharding.spec)
    return spec + (None,) * (len(shape.shape) - len(spec))


def _infer_sharding_from_operands(kernel, op, backend, result, mesh, arg_shapes, result_shape):
    # Every result dim is an operand dim of the same index (reduce_sum drops the last).
    return NamedSharding(mesh, PartitionSpec(*_spec(arg_shapes[0])[: len(result.shape)]))


def _partition(kernel, op, backend, result, mesh, arg_shapes, result_shape):
    # Each operand takes the first one's sharding: the partitioner reshards
    # any operand that differs, rather than the kernel seeing unequal blocks.
    spec = _spec(arg_shapes[0])
    reduced_axes = spec[-1] if spec and op in _ACROSS_DEVICES else None
    if reduced_axes is not None and arg_shapes[0].shape[-1] % _devices_along(mesh, reduced_axes):
        # XLA pads an uneven split with unspecified values, which would enter
        # the row's max and sum: gather the reduced dim instead.
        spec, reduced_axes = (*spec[:-1], None), None

    def per_device(*xs: jax.Array) -> jax.Array:
        local = jax.ShapeDtypeStruct(xs[0].shape[: len(result.shape)], result.dtype)
        if reduced_axes is None:
            return kernel(op, backend, local, *xs)
        return _ACROSS_DEVICES[op](functools.partial(kernel, op, backend, local), reduced_axes, *xs)

    operand_sharding = NamedSharding(mesh, PartitionSpec(*spec))
    result_sharding = NamedSharding(mesh, PartitionSpec(*spec[: len(result.shape)]))
    return mesh, per_device, result_sharding, (operand_sharding,) * len(arg_shapes)


def _devices_along(mesh: jax.sharding.Mesh, axes: str | tuple[str, ...]) -> int:
    return math.prod(mesh.shape[a] for a in ((axes,) if isinstance(axes, str) else axes))


def _sharding_rule(kernel, op, backend, result, mesh, operand_types, result_types):
    return _RULES[op]


_partitioned.def_partition(
    _partition,
    infer_sharding_from_operands=_infer_sharding_from_operands,
    sharding_rule=_sharding_rule,
)


# The per-device computations for a sharded reduced dim. ``local`` runs the
# kernel on this device's block; ``axes`` are the mesh axes that split each
# row. Corrections are computed in float32 and are per row, so the
# collectives move one value per row, not the rows themselves.


def _reduce_sum_across(local: Callable[..., jax.Array], axes, x: jax.Array) -> jax.Array:
    partial_sums = local(x).astype(jnp.float32)
    return jax.lax.psum(partial_sums, axes).astype(x.dtype)


def _softmax_across(local: Callable[..., jax.Array], axes, x: jax.Array) -> jax.Array:
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


def _softmax_backward_across(
    local: Callable[..., jax.Array], axes, y: jax.Array, g: jax.Array
) -> jax.Array:
    # The kernel gives y * (g - block_dot); the answer is y * (g - row_dot).
    dx = local(y, g)
    block_dot = jnp.sum(y.astype(jnp.float32) * g.astype(jnp.float32), axis=-1, keepdims=True)
    row_dot = jax.lax.psum(block_dot, axes)
    return (dx.astype(jnp.float32) + y.astype(jnp.float32) * (block_dot - row_dot)).astype(y.dtype)


_ACROSS_DEVICES: dict[str, Callable[..., jax.Array]] = {
    "reduce_sum": _reduce_sum_across,
    "softmax": _softmax_across,
    "softmax_backward": _softmax_backward_across,
}

__all__ = ("Kernel", "partitioned_call")
