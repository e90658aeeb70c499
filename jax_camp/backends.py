"""Which kernels run an op: the backend names, and the FFI call that runs one.

Backends:

* ``None`` (the default): jax_camp's own kernels for the platform the
  computation is lowered for, the CUDA kernels on a GPU and the C++ host
  kernels on a CPU. ``JAX_CAMP_BACKEND`` in the environment may name another.
* ``"cuda"``: the CUDA kernels; lowering for another platform is an error.
* ``"cpu"``: the C++ host kernels; lowering for another platform is an error.
* ``"tilelang"``: the TileLang kernels (GPU only; needs ``pip install .[tilelang]``).
* ``"xla"``: plain JAX (``jax.nn.softmax``, ``jnp.sum``, ...), the reference
  the tests and benchmarks compare with.
"""

from __future__ import annotations

import functools
import os
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
from jax.core import ShapedArray
from jax.extend.core import Primitive
from jax._src import dispatch
from jax.interpreters import ad, batching, mlir
from jax.sharding import NamedSharding, PartitionSpec

from jax_camp import registration, sharding
from jax_camp.ops._spec import OpSpec

BACKENDS: tuple[str, ...] = ("cuda", "cpu", "tilelang", "xla")
ENV_VAR = "JAX_CAMP_BACKEND"
# The platform's own kernels: the backend that None selects.
PLATFORM = "platform"
# Lowering platforms each explicit kernel backend can run on.
_PLATFORMS_OF = {"cuda": ("cuda",), "tilelang": ("cuda",), "cpu": ("cpu",)}


def resolve(backend: str | None) -> str:
    """Validates ``backend`` and returns it, or the default for None."""
    if backend is None:
        from_env = os.environ.get(ENV_VAR)
        if not from_env:
            return PLATFORM
        if from_env not in BACKENDS:
            raise ValueError(
                f"{ENV_VAR}={from_env!r} is not a jax_camp backend; choose one of {BACKENDS}"
            )
        return from_env
    if not isinstance(backend, str):
        raise TypeError(
            f"backend must be None or a str, one of {BACKENDS}; got {type(backend).__name__} {backend!r}"
        )
    if backend not in BACKENDS:
        raise ValueError(
            f"backend={backend!r} is not a jax_camp backend; choose None or one of {BACKENDS}"
        )
    if _PLATFORMS_OF.get(backend) == ("cuda",) and not _has_gpu():
        raise ValueError(f"backend={backend!r} needs a GPU, and JAX sees none")
    if backend == "cuda" and not registration.BUILT_WITH_CUDA:
        raise ValueError(
            "backend='cuda' needs jax_camp's CUDA kernels, and this install was built without "
            "them (nvcc was not found when it was built, or JAX_CAMP_CUDA=OFF): reinstall it "
            "where nvcc is found (pip install .), or use backend='tilelang' or 'xla'"
        )
    return backend


def _has_gpu() -> bool:
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


def primitive(spec: OpSpec) -> Primitive:
    """The JAX primitive that runs the kernel ``spec`` describes, made once per kernel.

    It holds what every kernel shares: its abstract evaluation (``spec.result``), its lowering
    (the FFI call, partitioned along the operands' sharding by ``jax_camp.sharding``) and its
    batching rule (a vmapped call is the same kernel call with the batch dims in front, as the
    kernels treat leading dims as independent rows). Each op module adds its derivative rules
    (``jax.interpreters.ad``) to its own kernels' primitives. ``backend`` is its one parameter.
    """
    if spec.name in _PRIMITIVES:
        return _PRIMITIVES[spec.name]
    p = Primitive(spec.ffi_target)
    p.def_abstract_eval(functools.partial(_result_type, spec))
    # Outside jit the primitive runs as its own compiled call, as JAX's primitives do; JAX's
    # impl rule also holds under jax.disable_jit, where a jax.jit of p.bind would call itself.
    p.def_impl(functools.partial(dispatch.apply_primitive, p))
    batching.primitive_batchers[p] = functools.partial(_batch_as_rows, p)
    mlir.register_lowering(p, functools.partial(_lowering, spec))
    # The lowering holds a custom_partitioning call, which needs the devices to lower for; JAX
    # learns that of a primitive only from this set, as of its own cuDNN attention primitives.
    dispatch.prim_requires_devices_during_lowering.add(p)
    _PRIMITIVES[spec.name] = p
    return p


_PRIMITIVES: dict[str, Primitive] = {}


def _result_type(spec: OpSpec, operand: ShapedArray, *_, backend: str) -> ShapedArray:
    """The kernel's result type: ``spec.result_shape`` of the first operand's shape, in its dtype,
    sharded as the first operand is along the dims the result keeps. Under a mesh of Explicit
    axes, where shardings are part of the types, the ops after the kernel see that sharding."""
    partition = PartitionSpec(*sharding.result_partition(spec, operand))
    return operand.update(shape=spec.result_shape(operand.shape), weak_type=False,
                          sharding=NamedSharding(operand.sharding.mesh, partition))


def _batch_as_rows(p: Primitive, operands, batch_dims, *, backend: str):
    size = next(x.shape[d] for x, d in zip(operands, batch_dims) if d is not None)
    operands = [
        jnp.broadcast_to(x, (size, *x.shape)) if d is None else jnp.moveaxis(x, d, 0)
        for x, d in zip(operands, batch_dims)
    ]
    return _bind(p, *operands, backend=backend), 0


def _lowering(spec: OpSpec, ctx, *operands, backend: str):
    # The one place that knows which platform the computation is compiled for: an explicit
    # backend that cannot run there fails with a clear error instead of an XLA
    # "no custom call target" message.
    allowed = _PLATFORMS_OF.get(backend)
    for platform in ctx.module_context.platforms if allowed else ():
        if platform not in allowed:
            needs = "a GPU" if allowed == ("cuda",) else "the CPU"
            raise ValueError(
                f"backend={backend!r} needs {needs}, but this computation is lowered for "
                f"{platform!r}; use backend=None for the platform's own kernels"
            )
    call = functools.partial(sharding.partitioned_call, _local_kernel_call, spec, backend)
    return mlir.lower_fun(call, multiple_results=False)(ctx, *operands)


def kernel_call(spec: OpSpec, backend: str, *operands: jax.Array) -> jax.Array:
    """Runs the kernel ``spec`` describes on ``backend`` (its primitive, ``primitive(spec)``).

    Under ``jax.jit`` over a mesh the call is partitioned along the operands' sharding (see
    ``jax_camp.sharding``), and under ``jax.vmap`` batched as extra rows.
    """
    return _bind(primitive(spec), *operands, backend=backend)


def _bind(p: Primitive, *operands: jax.Array, backend: str) -> jax.Array:
    """``p.bind``, its operands first made to vary over the same manual mesh axes inside
    ``shard_map``, as JAX's own ops of several operands make theirs: the result then varies
    wherever an operand does, and the gradient of an operand that did not vary is summed over
    the devices (the transpose of ``pcast``). Outside shard_map nothing varies and nothing changes."""
    varying = [jax.typeof(x).mat.varying for x in operands]
    every = frozenset().union(*varying)
    operands = tuple(
        x if v == every else jax.lax.pcast(x, tuple(n for n in every if n not in v), to="varying")
        for x, v in zip(operands, varying)
    )
    return p.bind(*operands, backend=backend)


def _local_kernel_call(spec: OpSpec, backend: str, *operands: jax.Array) -> jax.Array:
    """The kernel call itself, on whole arrays or on one device's blocks."""
    if backend == "tilelang":
        from jax_camp.tilelang_kernels import bridge

        return bridge.kernel_call(spec, *operands)
    scratch = spec.scratch_results(operands[0].shape)
    call = jax.ffi.ffi_call(spec.ffi_target, (spec.result(operands[0]), *scratch))
    return call(*operands)[0]


def def_jvp_from_output(
    p: Primitive,
    tangent: Primitive,
    finish: Callable[..., jax.Array] | None = None,
) -> None:
    """The JVP of a kernel ``y = p(x, *rest)`` whose tangent is the kernel ``tangent(y, t)``,
    from its output: nothing of the forward is recomputed. ``rest`` (a mask) has no tangent;
    ``finish(dy, *rest)``, where given, makes the final tangent of the kernel's."""

    def jvp(primals, tangents, *, backend: str):
        (x, *rest), (t, *_) = primals, tangents
        y = _bind(p, x, *rest, backend=backend)
        t = ad.instantiate_zeros(t).astype(y.dtype)
        dy = _bind(tangent, y, t, backend=backend)
        return y, dy if finish is None else finish(dy, *rest)

    ad.primitive_jvps[p] = jvp


def def_linear_in_second(
    p: Primitive,
    jvp_in_first: Callable[..., jax.Array],
    transpose: Primitive,
) -> None:
    """Derivative rules for a kernel ``p(y, v)`` that is linear in ``v`` given ``y``, as a
    softmax backward is in its cotangent (and a tangent map in its tangent) given the forward's
    output ``y``: its JVP is ``jvp_in_first(dy, y, v, backend=...)`` plus ``p(y, dv)``, and its
    transpose in ``v`` is the kernel ``transpose(y, ct)``. ``y`` is never a linear input."""

    def jvp_in_second(dv: jax.Array, y: jax.Array, v: jax.Array, *, backend: str) -> jax.Array:
        return _bind(p, y, dv.astype(y.dtype), backend=backend)

    def transpose_rule(ct, y, v, *, backend: str):
        assert not ad.is_undefined_primal(y), "linear in its second operand alone"
        if type(ct) is ad.Zero:
            return None, ad.Zero(v.aval)
        return None, _bind(transpose, y, ct, backend=backend)

    ad.defjvp(p, jvp_in_first, jvp_in_second)
    ad.primitive_transposes[p] = transpose_rule


def uses_kernels(backend: str) -> bool:
    """False for the "xla" reference backend, which runs plain JAX."""
    return backend != "xla"


__all__: Sequence[str] = (
    "BACKENDS", "ENV_VAR", "resolve", "primitive", "kernel_call", "def_jvp_from_output",
    "def_linear_in_second", "uses_kernels",
)
