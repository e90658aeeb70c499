"""Runs the TileLang kernels on JAX arrays, inside jax.jit, on XLA's stream.

How a call travels (docs/tilelang.md has the measurements):

1. At trace time the op's tile program is compiled once per
   (op, dtype, configuration: the RowTile that ``_rows.row_tile`` picks for a row kernel)
   with TileLang's ``tvm_ffi`` execution backend,
   outputs passed as arguments (no ``out_idx``): the compiled ``main`` takes
   ``(*inputs, *outputs)`` as DLPack tensors and launches on the current TVM
   FFI stream. TileLang's disk cache makes later processes skip nvcc.
2. ``jax_tvm_ffi.register_ffi_target`` wraps that function as an XLA FFI
   handler: XLA's own device buffers become DLPack tensors and XLA's CUDA
   stream becomes the stream the kernel launches on. No host round trip, no
   copy, no torch tensor, no Python at run time.
3. ``jax.ffi.ffi_call`` emits the custom call, like the CUDA backend does.

A compiled tile program has a fixed rank, so the bridge reshapes every
operand (a where= mask too) to the rank its kernel expects (flat for copy and
vector_add, (rows, cols) for the rest; a free bitcast in XLA) and reshapes the
result back. Batching never reaches the bridge: ``jax_camp.sharding`` handles vmap
for every backend by moving the batch dim in front, where it is more rows,
so one kernel still serves every batch size, but for a row held over a cluster,
whose rows a cluster takes follow the row count (``_rows.wave_row_groups``).
"""

from __future__ import annotations

import functools
import importlib
import math
import threading
from typing import Callable, NamedTuple

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

from jax_camp import registration
from jax_camp.ops._spec import MASK_DTYPE, SUPPORTED_DTYPE_NAMES, SUPPORTED_DTYPES, OpSpec
from jax_camp.tilelang_kernels import _occupancy
from jax_camp.tilelang_kernels._rows import (CLUSTER_SIZES, MAX_THREADS, SHARED_MEMORY_BYTES,
                                             RowTile, row_tile)

class TileLangKernel(NamedTuple):
    """What the bridge needs to compile and call one op's TileLang kernel. It sees its
    operands as (rows, cols) where ``spec.along_rows``, else as one flat buffer."""

    spec: OpSpec
    program: Callable[[str, RowTile | None], tirx.PrimFunc]  # the tile program for (dtype, tile)


def _kernel_of(spec: OpSpec) -> TileLangKernel:
    """``spec``'s kernel: ``<name>_program`` in ``jax_camp.tilelang_kernels.<tilelang_module>``."""
    module = importlib.import_module(f"jax_camp.tilelang_kernels.{spec.tilelang_module}")
    build = getattr(module, f"{spec.name}_program")
    if spec.along_rows:
        return TileLangKernel(spec, build)
    # The flat kernels have one configuration: they find their full tiles themselves.
    return TileLangKernel(spec, lambda dtype, tile: build(dtype))


OPS: dict[str, TileLangKernel] = {name: _kernel_of(spec) for name, spec in registration.SPECS.items()}

_lock = threading.Lock()
# (op, dtype, tile) -> FFI target name; a flat kernel's tile is None. The compiled
# kernels stay referenced here for the life of the process: XLA keeps calling them.
_targets: dict[tuple[str, str, RowTile | None], str] = {}
_kernels: dict[tuple[str, str, RowTile | None], object] = {}


# A row tile that takes row groups in turn loads the next group with cp.async in TileLang's
# software pipeline; its warp-specialized pipeline (sm_90's default) does not lower the
# block-wide reductions those kernels make. No other kernel has a pipeline.
PASS_CONFIGS = {"tl.disable_warp_specialized": True}


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


@functools.cache
def resident_clusters() -> dict[int, int] | None:
    """How many clusters of each size in ``_rows.CLUSTER_SIZES`` JAX's first GPU keeps
    resident, a cluster tile's block alone on each SM; None where there are no clusters (no
    GPU, or one before sm_90). Asked of the driver once a process."""
    target = compile_target()
    if target is None or int(target["arch"].removeprefix("sm_").rstrip("a")) < 90:
        return None
    device = jax.devices("gpu")[0].local_hardware_id
    return _occupancy.resident_clusters(device, CLUSTER_SIZES, MAX_THREADS, SHARED_MEMORY_BYTES)


def build_program(op: str, dtype: str, tile: RowTile | None) -> tirx.PrimFunc:
    """The tile program for ``op`` by ``tile`` (None for a flat kernel); TileLang's program
    builder is not thread-safe."""
    return OPS[op].program(dtype, tile)


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
        pass_configs=PASS_CONFIGS,
    )


def ffi_target(op: str, dtype: str, tile: RowTile | None) -> str:
    """Name of the XLA FFI target running ``op`` by ``tile``; compiles and registers on first
    use."""
    key = (op, dtype, tile)
    with _lock:
        name = _targets.get(key)
        if name is not None:
            return name
        kernel = compile_program(build_program(op, dtype, tile))
        symbol = str(kernel.prim_func.attrs["global_symbol"])
        function = kernel.adapter.get_exportable_executable()[symbol]
        name = f"jax_camp_tilelang_{op}_{dtype}" + (f"_{tile.name}" if tile else "")
        jax_tvm_ffi.register_ffi_target(name, function, ["args", "rets"], platform="gpu")
        _kernels[key] = kernel
        _targets[key] = name
        return name


def _run(kernel: TileLangKernel, *operands: jax.Array) -> jax.Array:
    """One kernel launch on unbatched operands of any rank."""
    spec, x = kernel.spec, operands[0]
    shape, dtype = x.shape, jnp.dtype(x.dtype).name
    if spec.along_rows:
        kernel_shape = (math.prod(shape[:-1]), shape[-1])
        tile = row_tile(shape[-1], dtype, spec.name, kernel_shape[0], resident_clusters())
    else:
        kernel_shape = (math.prod(shape),)
        tile = None
    out_shape = spec.result_shape(shape)
    if math.prod(kernel_shape) == 0:
        # A launch over nothing would be an invalid (empty) grid; an empty
        # row sums to 0 and every other op has nothing to write.
        return jnp.zeros(out_shape, x.dtype)
    name = ffi_target(spec.name, dtype, tile)
    call = jax.ffi.ffi_call(name, jax.ShapeDtypeStruct(spec.result_shape(kernel_shape), x.dtype))
    return call(*(o.reshape(kernel_shape) for o in operands)).reshape(out_shape)


def kernel_call(spec: OpSpec, *operands: jax.Array) -> jax.Array:
    """Runs the TileLang kernel of ``spec`` on ``operands``.

    Raises ValueError (never crashes) for an op without a TileLang kernel, a
    wrong operand count, mismatched shapes or dtypes, a dtype without a kernel, or a
    symbolic shape.
    """
    op = spec.name
    if op not in OPS:
        raise ValueError(f"no TileLang kernel for op {op!r}; choose one of {tuple(OPS)}")
    if len(operands) != spec.arity:
        raise ValueError(f"TileLang {op} takes {spec.arity} operand(s), got {len(operands)}")
    x = operands[0]
    dtype = jnp.dtype(x.dtype)
    if dtype not in SUPPORTED_DTYPES:
        raise ValueError(
            f"TileLang {op} has no kernel for dtype {dtype}; use {SUPPORTED_DTYPE_NAMES}"
        )
    # Every operand has x's shape and dtype, but a where= mask, which is bool.
    dtypes = [dtype] * len(operands)
    if spec.mask_operand:
        dtypes[-1] = MASK_DTYPE
    for other, want in zip(operands[1:], dtypes[1:]):
        if other.shape != x.shape or jnp.dtype(other.dtype) != want:
            mask = f", the last (a where= mask) in {MASK_DTYPE}" if spec.mask_operand else ""
            raise ValueError(
                f"TileLang {op} needs operands of x's shape and dtype, {x.shape} {dtype}{mask}; "
                f"got {other.shape} {jnp.dtype(other.dtype)}"
            )
    if spec.along_rows and x.ndim == 0:
        raise ValueError(f"TileLang {op} works along the last dim and needs rank >= 1")
    if not all(isinstance(dim, int) for dim in x.shape):
        raise ValueError(
            f"TileLang {op} compiles a kernel for the shape it runs on, and x's shape {x.shape} "
            "is symbolic (a shape-polymorphic jax.export); export with backend=None or 'cuda'"
        )
    return _run(OPS[op], *operands)


__all__ = [
    "OPS", "TileLangKernel", "build_program", "compile_program", "compile_target", "ffi_target",
    "kernel_call",
]
