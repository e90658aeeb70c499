"""Runs jax_camp's kernels on sharded arrays without gathering them.

XLA cannot see inside a custom call, so by default its SPMD partitioner
gathers a custom call's operands whole onto every device and computes the
full result everywhere. ``partitioned_call`` wraps a kernel call in
``jax.experimental.custom_partitioning`` instead:

* the kernel's Shardy sharding rule (``OpSpec.sharding_rule``: ``"... i -> ... i"``
  for softmax, ``"... i -> ..."`` with ``i`` a reduction factor for
  reduce_sum, ``"... -> ..."`` for copy) lets sharding propagate through the
  call, and
* a ``partition`` callback (also used under the older GSPMD partitioner,
  together with ``infer_sharding_from_operands``) runs the kernel on each
  device's block. When the reduced (last) dim is sharded, the blocks' results
  are combined with small collectives over that dim's mesh axes, by the op's
  ``OpSpec.combine_across_devices``: reduce_sum adds partial sums (psum);
  softmax and its backward exchange per-row max and sum (pmax, psum) and
  rescale each block; the data itself never moves.

On one device, in ``shard_map`` (every mesh axis manual) and under ``pmap``,
custom_partitioning lowers to the plain kernel call.

``partitioned_call`` is each kernel primitive's lowering (``jax_camp.backends.primitive``),
so batching and differentiation never reach it: they are the primitives' rules.
"""

from __future__ import annotations

import functools
import math
from typing import Callable

import jax
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from jax_camp.ops._spec import OpSpec

# Runs a kernel on (per-device) arrays: ``kernel(spec, backend, *operands)``.
Kernel = Callable[..., jax.Array]


def partitioned_call(kernel: Kernel, spec: OpSpec, backend: str, *operands: jax.Array) -> jax.Array:
    """``kernel(spec, backend, *operands)``, partitioned along the operands' sharding."""
    return _partitioned(kernel, spec, backend)(*operands)


@functools.lru_cache(maxsize=None)
def _partitioned(kernel: Kernel, spec: OpSpec, backend: str) -> custom_partitioning:
    """The kernel call as a custom_partitioning function, made once per kernel and backend.
    What it runs is closed over rather than passed as custom_partitioning's static arguments,
    whose tracing holds the operands' tracers where jax.checking_leaks finds them."""

    def call(*operands: jax.Array) -> jax.Array:
        return kernel(spec, backend, *operands)

    partitioned = custom_partitioning(call)
    partitioned.def_partition(
        functools.partial(_partition, kernel, spec, backend),
        infer_sharding_from_operands=functools.partial(_infer_sharding_from_operands, spec),
        sharding_rule=functools.partial(_sharding_rule, spec),
    )
    return partitioned


def _partition_spec(shape: jax.ShapeDtypeStruct) -> tuple:
    """``shape``'s partition spec with one entry per dim."""
    sharding = shape.sharding
    if sharding is None or (not isinstance(sharding, NamedSharding) and sharding.is_fully_replicated):
        # An array off the mesh, under jax.set_mesh, is whole on every device; so is an operand
        # that GSPMD's propagation has not given a sharding yet.
        return (None,) * len(shape.shape)
    if not isinstance(sharding, NamedSharding):
        # Only a mesh names the axes that the collectives run over. The
        # partitioner gives none in a shard_map over only some mesh axes.
        raise NotImplementedError(
            f"jax_camp: cannot partition a kernel whose operand sharding names no mesh "
            f"axes ({sharding}); inside shard_map, make every mesh axis manual"
        )
    spec = tuple(sharding.spec)
    return spec + (None,) * (len(shape.shape) - len(spec))


def _result_rank(spec: OpSpec, operand: jax.ShapeDtypeStruct) -> int:
    return len(spec.result_shape(operand.shape))


def result_partition(spec: OpSpec, operand: jax.ShapeDtypeStruct) -> tuple:
    """The partition spec of the kernel's result: its first operand's, along the dims the result
    keeps (every result dim is an operand dim of the same index; reduce_sum drops the last)."""
    return _partition_spec(operand)[: _result_rank(spec, operand)]


def _infer_sharding_from_operands(spec, mesh, arg_shapes, result_shape):
    return NamedSharding(mesh, PartitionSpec(*result_partition(spec, arg_shapes[0])))


def _partition(kernel, spec, backend, mesh, arg_shapes, result_shape):
    # Each operand takes the first one's sharding: the partitioner reshards
    # any operand that differs, rather than the kernel seeing unequal blocks.
    partition = _partition_spec(arg_shapes[0])
    combine = spec.combine_across_devices
    reduced_axes = partition[-1] if partition and combine is not None else None
    if reduced_axes is not None and arg_shapes[0].shape[-1] % _devices_along(mesh, reduced_axes):
        # XLA pads an uneven split with unspecified values, which would enter
        # the row's max and sum: gather the reduced dim instead.
        partition, reduced_axes = (*partition[:-1], None), None

    # Traced as shard_map traces its body, every mesh axis manual: under jax.set_mesh over Explicit
    # axes its ops would otherwise carry sharding annotations that no later pass removes.
    manual = mesh.abstract_mesh.update_axis_types({name: AxisType.Manual for name in mesh.axis_names})

    def per_device(*xs: jax.Array) -> jax.Array:
        with jax.sharding.use_abstract_mesh(manual):
            if reduced_axes is None:
                return kernel(spec, backend, *xs)
            return combine(functools.partial(kernel, spec, backend), reduced_axes, *xs)

    operand_sharding = NamedSharding(mesh, PartitionSpec(*partition))
    result_rank = _result_rank(spec, arg_shapes[0])
    result_sharding = NamedSharding(mesh, PartitionSpec(*partition[:result_rank]))
    return mesh, per_device, result_sharding, (operand_sharding,) * len(arg_shapes)


def _devices_along(mesh: jax.sharding.Mesh, axes: str | tuple[str, ...]) -> int:
    return math.prod(mesh.shape[a] for a in ((axes,) if isinstance(axes, str) else axes))


def _sharding_rule(spec, mesh, operand_types, result_types):
    return spec.sharding_rule, {"reduction_factors": spec.reduction_factors}


__all__ = ("Kernel", "partitioned_call", "result_partition")
