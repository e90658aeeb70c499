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

import os
from typing import Sequence

import jax
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir

from jax_camp import sharding
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
    return backend


def _has_gpu() -> bool:
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


# An identity that emits no HLO. It exists for its lowering rule, the only
# place that knows which platform the computation is compiled for: there an
# explicit backend that cannot run on that platform fails with a clear error
# instead of an XLA "no custom call target" message.
_require_platform_p = Primitive("jax_camp_require_platform")
_require_platform_p.def_abstract_eval(lambda aval, **_: aval)
_require_platform_p.def_impl(
    lambda x, *, backend: jax.jit(lambda v: _require_platform_p.bind(v, backend=backend))(x)
)
batching.defvectorized(_require_platform_p)


def _require_platform_lowering(ctx, x, *, backend):
    allowed = _PLATFORMS_OF[backend]
    for platform in ctx.module_context.platforms:
        if platform not in allowed:
            needs = "a GPU" if allowed == ("cuda",) else "the CPU"
            raise ValueError(
                f"backend={backend!r} needs {needs}, but this computation is lowered for "
                f"{platform!r}; use backend=None for the platform's own kernels"
            )
    return [x]


mlir.register_lowering(_require_platform_p, _require_platform_lowering)


def kernel_call(spec: OpSpec, backend: str, *operands: jax.Array) -> jax.Array:
    """Runs the kernel ``spec`` describes on ``backend`` through an XLA FFI call.

    Under ``jax.jit`` over a mesh the call is partitioned along the operands'
    sharding, and under ``jax.vmap`` batched as extra rows; see
    ``jax_camp.sharding``.
    """
    if backend in _PLATFORMS_OF:
        first, *rest = operands
        operands = (_require_platform_p.bind(first, backend=backend), *rest)
    return sharding.partitioned_call(_local_kernel_call, spec, backend, *operands)


def _local_kernel_call(spec: OpSpec, backend: str, *operands: jax.Array) -> jax.Array:
    """The kernel call itself, on whole arrays or on one device's blocks."""
    if backend == "tilelang":
        from jax_camp.tilelang_kernels import bridge

        return bridge.kernel_call(spec, *operands)
    call = jax.ffi.ffi_call(spec.ffi_target, (spec.result(operands[0]), *spec.scratch_results))
    return call(*operands)[0]


def uses_kernels(backend: str) -> bool:
    """False for the "xla" reference backend, which runs plain JAX."""
    return backend != "xla"


__all__: Sequence[str] = ("BACKENDS", "ENV_VAR", "resolve", "kernel_call", "uses_kernels")
