"""What is measured: the ops (one entry each in OPS), their shapes, and their inputs.

An op's operand count, whether it works along rows and the bytes it moves come from jax_camp's
descriptions of the kernels it runs (``jax_camp.ops._spec.OpSpec``); the harness adds only how
XLA and a float64 reference compute the same thing."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp

import jax_camp
from jax_camp.ops._spec import SUPPORTED_DTYPES, OpSpec
from jax_camp.ops.copy import COPY
from jax_camp.ops.log_softmax import LOG_SOFTMAX, LOG_SOFTMAX_BACKWARD
from jax_camp.ops.reduce_sum import REDUCE_SUM
from jax_camp.ops.softmax import SOFTMAX, SOFTMAX_BACKWARD
from jax_camp.ops.vector_add import VECTOR_ADD

DTYPES = {dtype.name: dtype for dtype in SUPPORTED_DTYPES}
TOLERANCE = {"float32": 1e-5, "bfloat16": 1e-2, "float16": 1e-2}
DEFAULT_DTYPES = ("float32", "bfloat16")

# The matrix: five large row shapes, the camp's shapes, and flat sizes for the
# elementwise ops.
GPU_ROW_SHAPES = (
    "8192x8192", "65536x1024", "4096x32768", "262144x128", "1024x262144",
    "144x1280", "1008x1280", "1008x2304", "2032x2304", "784x3840", "4080x1536",
)
GPU_FLAT_SHAPES = ("1001*1024", "4093*1024", "65521*1024")
QUICK_GPU_SHAPES = ("8192x8192", "4096x32768", "1008x1280", "4093*1024")
# Small, so that the CI run stays well under two minutes on two cores; odd sizes reach the
# kernels' tail paths.
CPU_SHAPES = ("64x1000", "3x4099", "1001*16")
# Where dispatch dominates: the host's cost of a call.
HOST_SHAPE = "8x128"

MIB = 1 << 20
GIB = 1 << 30


@dataclasses.dataclass(frozen=True)
class Shape:
    label: str
    dims: tuple[int, ...]

    @property
    def elements(self) -> int:
        return math.prod(self.dims)

    @property
    def rows(self) -> int:
        return math.prod(self.dims[:-1]) if len(self.dims) > 1 else 1


def _product(text: str) -> int:
    value = math.prod(int(part) for part in text.split("*"))
    if value <= 0:
        raise ValueError(f"size {text!r} must be positive")
    return value


def parse_shape(text: str) -> Shape:
    """'8192x8192' is rows x cols; '1001*1024' is a flat array of that many elements."""
    text = text.strip().lower()
    try:
        dims = tuple(_product(part) for part in text.split("x"))
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"bad shape {text!r}: {error}") from None
    if len(dims) > 2:
        raise argparse.ArgumentTypeError(f"bad shape {text!r}: use RxC or N")
    return Shape(text, dims)


# --------------------------------------------------------------------------
# The ops


def _softmax_ref(xp: Any, x: Any, where: Any = None) -> Any:
    """softmax along the last axis; with ``where``, 0 where it drops x (a row keeps some)."""
    if where is not None:
        x = xp.where(where, x, -xp.inf)
    e = xp.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _log_softmax_ref(xp: Any, x: Any) -> Any:
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - xp.log(xp.exp(shifted).sum(axis=-1, keepdims=True))


def _softmax_grad_parts(xp: Any, x: Any, w: Any) -> tuple[Any, Any, Any]:
    """Value and gradient of sum(softmax(x) * w), and the value's error scale: the value sums
    M*N terms of both signs, so its rounding error goes with sum|y*w|, not with the value."""
    y = _softmax_ref(xp, x)
    yw = y * w
    return yw.sum(), y * (w - yw.sum(axis=-1, keepdims=True)), xp.abs(yw).sum()


def _log_softmax_grad_parts(xp: Any, x: Any, w: Any) -> tuple[Any, Any, Any]:
    """As _softmax_grad_parts, for sum(log_softmax(x) * w): the gradient is w - softmax * sum(w)."""
    y = _log_softmax_ref(xp, x)
    yw = y * w
    return yw.sum(), w - xp.exp(y) * w.sum(axis=-1, keepdims=True), xp.abs(yw).sum()


def _norms(xp: Any, inputs: Sequence[Any], refs: Sequence[Any]) -> list[Any]:
    return [xp.sqrt((r * r).sum()) for r in refs]


def _value_and_grad(softmax_fn: Callable[[jax.Array], jax.Array]) -> Callable:
    # Only softmax_fn differs between the two sides: the loss, its reduction and the
    # cotangent fed back are the same code.
    def loss_and_grad(x: jax.Array, w: jax.Array) -> Any:
        return jax.value_and_grad(lambda v: jnp.sum(softmax_fn(v) * w))(x)
    return loss_and_grad


def _grad_op(forward: OpSpec, backward: OpSpec, xla: Callable, parts: Callable) -> Op:
    """value_and_grad of sum(<forward>(x) * w), on XLA's function and on jax_camp's: the forward
    and the backward kernel; the loss's own pass is the same on both sides and not counted."""
    def error_scales(xp: Any, inputs: Sequence[Any], refs: Sequence[Any]) -> list[Any]:
        return [parts(xp, *inputs)[2], _norms(xp, inputs, refs)[1]]

    return Op(f"{forward.name}_grad", 2, True, functools.partial(_elements_moved, (forward, backward)),
              _value_and_grad(lambda v: xla(v, axis=-1)),
              lambda backend: _value_and_grad(
                  lambda v: getattr(jax_camp, forward.name)(v, axis=-1, backend=backend)),
              lambda xp, ins: list(parts(xp, *ins)[:2]), error_scales)


def _camp(name: str, **kwargs: Any) -> Callable[[str], Callable]:
    """jax_camp.<name> on a backend, looked up at trace time (tests replace it)."""
    return lambda backend: lambda *xs: getattr(jax_camp, name)(*xs, **kwargs, backend=backend)


def _elements_moved(kernels: Sequence[OpSpec], shape: Shape) -> int:
    """Each kernel reads each of its operands once and writes its result once."""
    return sum(k.arity * shape.elements + math.prod(k.result_shape(shape.dims)) for k in kernels)


@dataclasses.dataclass(frozen=True)
class Op:
    name: str
    inputs: int
    row_op: bool  # works along rows, so it takes RxC shapes only
    elements_moved: Callable[[Shape], int]
    xla: Callable  # plain JAX, as a user writes it
    camp: Callable[[str], Callable]  # backend -> the same function on jax_camp's kernels
    reference: Callable[[Any, Sequence[Any]], list[Any]]  # (numpy or jnp, inputs) -> outputs
    error_scales: Callable[[Any, Sequence[Any], Sequence[Any]], list[Any]] = _norms
    mask_input: bool = False  # the last input is a bool where= mask, one byte an element


def _kernel_op(spec: OpSpec, xla: Callable, reference: Callable, **camp_kwargs: Any) -> Op:
    """The op that is one jax_camp kernel, called through the public function of its name."""
    return Op(spec.name, spec.arity, spec.along_rows, functools.partial(_elements_moved, (spec,)),
              xla, _camp(spec.name, **camp_kwargs), reference)


OPS: dict[str, Op] = {op.name: op for op in (
    _kernel_op(COPY, jnp.copy, lambda xp, ins: [ins[0]]),
    _kernel_op(VECTOR_ADD, lambda x, y: x + y, lambda xp, ins: [ins[0] + ins[1]]),
    _kernel_op(REDUCE_SUM, lambda x: jnp.sum(x, axis=-1), lambda xp, ins: [ins[0].sum(axis=-1)],
               axis=-1),
    _kernel_op(SOFTMAX, lambda x: jax.nn.softmax(x, axis=-1), lambda xp, ins: [_softmax_ref(xp, ins[0])],
               axis=-1),
    _grad_op(SOFTMAX, SOFTMAX_BACKWARD, jax.nn.softmax, _softmax_grad_parts),
    # softmax(x, where=mask): x and a bool mask in, y out; the mask's bytes are counted.
    Op("softmax_where", 2, True, lambda s: 2 * s.elements,
       lambda x, m: jax.nn.softmax(x, axis=-1, where=m),
       lambda backend: lambda x, m: jax_camp.softmax(x, axis=-1, where=m, backend=backend),
       lambda xp, ins: [_softmax_ref(xp, ins[0], ins[1])], mask_input=True),
    _kernel_op(LOG_SOFTMAX, lambda x: jax.nn.log_softmax(x, axis=-1),
               lambda xp, ins: [_log_softmax_ref(xp, ins[0])], axis=-1),
    _grad_op(LOG_SOFTMAX, LOG_SOFTMAX_BACKWARD, jax.nn.log_softmax, _log_softmax_grad_parts),
)}


def bytes_moved(op: str, shape: Shape, dtype_name: str) -> int:
    mask_bytes = shape.elements if OPS[op].mask_input else 0
    return OPS[op].elements_moved(shape) * jnp.dtype(DTYPES[dtype_name]).itemsize + mask_bytes


def shapes_for(op: str, shapes: Sequence[Shape]) -> list[Shape]:
    return [s for s in shapes if len(s.dims) == 2 or not OPS[op].row_op]


@functools.cache
def jitted(op: str, backend: str) -> Callable:
    """The op as a user's program calls it, `jax.jit(f)`; one per (op, backend), so that test
    and bench mode share its executables."""
    spec = OPS[op]
    return jax.jit(spec.xla if backend == "xla" else spec.camp(backend))


# --------------------------------------------------------------------------
# Inputs


@functools.partial(jax.jit, static_argnums=(2, 3))
def _normal(seed: jax.Array, draw: jax.Array, dims: tuple[int, ...], dtype: Any) -> jax.Array:
    key = jax.random.fold_in(jax.random.key(seed), draw)
    return jax.random.normal(key, dims, jnp.float32).astype(dtype)


class KeyStream:
    """Fresh random normal data for every draw (never zeros), reproducible from one seed; drawn
    on the device, one compile per shape and dtype."""

    def __init__(self, seed: int) -> None:
        self._seed = jnp.uint32(seed % (1 << 32))
        self._draws = 0

    def normal(self, dims: tuple[int, ...], dtype: Any) -> jax.Array:
        self._draws += 1
        return _normal(self._seed, jnp.uint32(self._draws), tuple(dims), dtype)


def draw_inputs(keys: KeyStream, op: str, shape: Shape, dtype_name: str) -> tuple[jax.Array, ...]:
    inputs = [keys.normal(shape.dims, DTYPES[dtype_name]) for _ in range(OPS[op].inputs)]
    if OPS[op].mask_input:  # keeps about two elements in three
        inputs[-1] = inputs[-1] > -0.43
    return tuple(inputs)


def input_sets(op: str, shape: Shape, dtype_name: str, count: int, seed: int) -> list[tuple]:
    """`count` distinct input sets; the same data for every backend of a case."""
    keys = KeyStream(seed)
    sets = [draw_inputs(keys, op, shape, dtype_name) for _ in range(count)]
    jax.block_until_ready(sets)
    return sets
