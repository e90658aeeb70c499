"""Runs the TileLang kernels on JAX arrays, inside jax.jit, on XLA's stream.

How a call travels (docs/tilelang.md has the measurements):

1. At trace time the op's tile program is compiled once per
   (op, dtype, configuration) with TileLang's ``tvm_ffi`` execution backend,
   outputs passed as arguments (no ``out_idx``): the compiled ``main`` takes
   ``(*inputs, *outputs)`` as DLPack tensors and launches on the current TVM
   FFI stream. TileLang's disk cache makes later processes skip nvcc.
2. ``jax_tvm_ffi.register_ffi_target`` wraps that function as an XLA FFI
   handler: XLA's own device buffers become DLPack tensors and XLA's CUDA
   stream becomes the stream the kernel launches on. No host round trip, no
   copy, no torch tensor, no Python at run time.
3. ``jax.ffi.ffi_call`` emits the custom call, like the CUDA backend does.

A compiled tile program has a fixed rank, so the bridge reshapes every
operand to the rank its kernel expects (flat for copy and vector_add,
(rows, cols) for the rest; a free bitcast in XLA) and reshapes the result
back. Batching never reaches the bridge: ``jax_camp.sharding`` handles vmap
for every backend by moving the batch dim in front, where it is more rows,
so one kernel still serves every batch size.
"""

from __future__ import annotations

import math
import threading
from typing import Callable

import jax
import jax.numpy as jnp

try:
    import jax_tvm_ffi
    import tilelang
except (ImportError, OSError) as _error:  # OSError: a wheel whose native library fails to load
    raise ImportError(
        "jax_camp's backend='tilelang' needs TileLang and jax-tvm-ffi: "
        f"pip install .[tilelang] ({_error})"
    ) from _error

from tvm import tirx

from jax_camp.tilelang_kernels import copy as _copy
from jax_camp.tilelang_kernels import reduce_sum as _reduce_sum
from jax_camp.tilelang_kernels import softmax as _softmax
from jax_camp.tilelang_kernels import vector_add as _vector_add
from jax_camp.tilelang_kernels._rows import is_aligned

DTYPES: dict[jnp.dtype, str] = {
    jnp.dtype(jnp.float32): "float32",
    jnp.dtype(jnp.bfloat16): "bfloat16",
    jnp.dtype(jnp.float16): "float16",
}

# op -> (operand count, whether the kernel sees (rows, cols) rows or a flat
# buffer, the tile program for (dtype, aligned)).
_FLAT, _ROWS = "flat", "rows"
OPS: dict[str, tuple[int, str, Callable[[str, bool], tirx.PrimFunc]]] = {
    "copy": (1, _FLAT, lambda dtype, aligned: _copy.copy_program(dtype)),
    "vector_add": (2, _FLAT, lambda dtype, aligned: _vector_add.vector_add_program(dtype)),
    "reduce_sum": (1, _ROWS, _reduce_sum.reduce_sum_program),
    "softmax": (1, _ROWS, _softmax.softmax_program),
    "softmax_backward": (2, _ROWS, _softmax.softmax_backward_program),
}

_lock = threading.Lock()
# (op, dtype, aligned) -> FFI target name. The compiled kernels stay
# referenced here for the life of the process: XLA keeps calling them.
_targets: dict[tuple[str, str, bool], str] = {}
_kernels: dict[tuple[str, str, bool], object] = {}


def compile_target() -> dict[str, str] | None:
    """The TileLang target: the architecture of JAX's first GPU.

    Compiling for the device JAX runs on, rather than whatever TileLang
    detects through torch, keeps the two from disagreeing. Without a GPU
    (tracing on a CPU machine) it is None: TileLang's own choice, which
    ``TILELANG_DEFAULT_TARGET`` can set.
    """
    try:
        device = jax.devices("gpu")[0]
    except RuntimeError:
        return None
    capability = getattr(device, "compute_capability", None)
    if not capability:
        return None
    return {"kind": "cuda", "arch": "sm_" + capability.replace(".", "")}


def build_program(op: str, dtype: str, aligned: bool) -> tirx.PrimFunc:
    """The tile program for ``op`` (TileLang's program builder is not thread-safe)."""
    return OPS[op][2](dtype, aligned)


def compile_program(
    program: tirx.PrimFunc, target: dict[str, str] | str | None = None
) -> tilelang.JITKernel:
    """Compiles a tile program with the tvm_ffi backend, outputs as arguments.

    ``target`` defaults to ``compile_target()``.
    """
    return tilelang.compile(
        program,
        execution_backend="tvm_ffi",
        target=compile_target() if target is None else target,
    )


def ffi_target(op: str, dtype: str, aligned: bool) -> str:
    """Name of the XLA FFI target running ``op``; compiles and registers on first use."""
    key = (op, dtype, aligned)
    with _lock:
        name = _targets.get(key)
        if name is not None:
            return name
        kernel = compile_program(build_program(op, dtype, aligned))
        symbol = str(kernel.prim_func.attrs["global_symbol"])
        function = kernel.adapter.get_exportable_executable()[symbol]
        name = f"jax_camp_tilelang_{op}_{dtype}" + ("_aligned" if aligned else "")
        jax_tvm_ffi.register_ffi_target(name, function, ["args", "rets"], platform="gpu")
        _kernels[key] = kernel
        _targets[key] = name
        return name


def _result_shape(op: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape[:-1] if op == "reduce_sum" else shape


def _run(op: str, *operands: jax.Array) -> jax.Array:
    """One kernel launch on unbatched operands of any rank."""
    x = operands[0]
    shape, dtype = x.shape, DTYPES[jnp.dtype(x.dtype)]
    out_shape = _result_shape(op, shape)
    if OPS[op][1] == _FLAT:
        kernel_shape = (math.prod(shape),)
        kernel_out = kernel_shape
        aligned = False  # no variants: the flat kernels find their full tiles themselves
    else:
        kernel_shape = (math.prod(shape[:-1]), shape[-1])
        kernel_out = kernel_shape[:1] if op == "reduce_sum" else kernel_shape
        aligned = is_aligned(shape[-1], dtype)
    if math.prod(kernel_shape) == 0:
        # A launch over nothing would be an invalid (empty) grid; an empty
        # row sums to 0 and every other op has nothing to write.
        return jnp.zeros(out_shape, x.dtype)
    name = ffi_target(op, dtype, aligned)
    call = jax.ffi.ffi_call(name, jax.ShapeDtypeStruct(kernel_out, x.dtype))
    return call(*(o.reshape(kernel_shape) for o in operands)).reshape(out_shape)


def kernel_call(op: str, result: jax.ShapeDtypeStruct, *operands: jax.Array) -> jax.Array:
    """Runs TileLang kernel ``op`` on ``operands``; ``result`` is the expected output.

    Raises ValueError (never crashes) for an unknown op, a wrong operand
    count, mismatched shapes or dtypes, or a dtype without a kernel.
    """
    if op not in OPS:
        raise ValueError(f"no TileLang kernel for op {op!r}; choose one of {tuple(OPS)}")
    count, layout, _ = OPS[op]
    if len(operands) != count:
        raise ValueError(f"TileLang {op} takes {count} operand(s), got {len(operands)}")
    x = operands[0]
    dtype = jnp.dtype(x.dtype)
    if dtype not in DTYPES:
        raise ValueError(
            f"TileLang {op} has no kernel for dtype {dtype}; use float32, bfloat16 or float16"
        )
    for other in operands[1:]:
        if other.shape != x.shape or jnp.dtype(other.dtype) != dtype:
            raise ValueError(
                f"TileLang {op} needs operands of one shape and dtype, got "
                f"{x.shape} {dtype} and {other.shape} {jnp.dtype(other.dtype)}"
            )
    if layout == _ROWS and x.ndim == 0:
        raise ValueError(f"TileLang {op} works along the last dim and needs rank >= 1")
    expected = jax.ShapeDtypeStruct(_result_shape(op, x.shape), dtype)
    if tuple(result.shape) != expected.shape or jnp.dtype(result.dtype) != dtype:
        raise ValueError(
            f"TileLang {op} of {x.shape} {dtype} gives {expected.shape} {dtype}, "
            f"not the requested {tuple(result.shape)} {jnp.dtype(result.dtype)}"
        )
    return _run(op, *operands)


__all__ = [
    "DTYPES", "OPS", "build_program", "compile_program", "compile_target", "ffi_target", "kernel_call",
]
