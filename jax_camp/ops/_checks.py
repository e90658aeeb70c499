"""Trace-time argument checks shared by the ops, with JAX's error types:
TypeError for a wrong dtype or argument type, ValueError for a wrong value."""

from __future__ import annotations

import math
import operator
from typing import Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np

try:  # JAX marks a value weak only through this private conversion (weakly_typed_as)
    from jax._src.lax.lax import _convert_element_type
except ImportError:
    _convert_element_type = None

from jax_camp.ops._spec import SUPPORTED_DTYPE_NAMES, SUPPORTED_DTYPES


Axis = Union[int, Sequence[int], None]


# What jnp's functions take as an array argument: arrays and scalars, not
# lists or tuples (jnp.add([1.0], 2) is a TypeError too).
_ARRAY_LIKE = (jax.Array, np.ndarray, np.generic, bool, int, float)


def array_like(op: str, name: str, x: object) -> jax.Array:
    """``x`` as a JAX array, keeping a Python scalar's weak type; a TypeError names the op and
    the argument for anything but an array or a scalar."""
    if not isinstance(x, _ARRAY_LIKE) and not hasattr(x, "__jax_array__"):
        raise TypeError(f"jax_camp.{op}: {name} must be an array or a scalar, got {type(x).__name__}")
    return jnp.asarray(x)


def check_dtype(op: str, name: str, dtype: jnp.dtype) -> None:
    if dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"jax_camp.{op}: {name} has dtype {dtype}; supported dtypes are {SUPPORTED_DTYPE_NAMES}"
        )


def float_array(op: str, name: str, x: jax.typing.ArrayLike) -> jax.Array:
    """``x`` as a JAX array of a dtype jax_camp has kernels for."""
    x = array_like(op, name, x)
    check_dtype(op, name, x.dtype)
    return x


def weakly_typed_as(y: jax.Array, weak: bool) -> jax.Array:
    """``y``, weakly typed where jnp's result would be (``weak``): a kernel's output is strongly
    typed, and a weak result must stay weak to promote as JAX's would (``1.0 + bfloat16`` is
    bfloat16). JAX has no public way to mark a value weak; its lax module's conversion takes
    the flag. Were that private function to go, results would stay strongly typed (and the
    weak-type tests fail), not the import."""
    if not weak or _convert_element_type is None:
        return y
    return _convert_element_type(y, jnp.dtype(y.dtype), weak_type=True)


def where_mask(op: str, where: jax.typing.ArrayLike, shape: tuple[int, ...]) -> jax.Array:
    """``where`` as the kernels' mask (bool, ``_spec.MASK_DTYPE``) of ``shape``, true keeping an
    element. As in jax.nn, it must be boolean (a ValueError, as jnp's reductions raise); it
    must also broadcast to ``shape`` (a ValueError names both shapes)."""
    mask = array_like(op, "where", where)
    if mask.dtype != bool:
        raise ValueError(f"jax_camp.{op}: where must be a boolean array, got {mask.dtype}")
    try:
        fits = jnp.broadcast_shapes(mask.shape, shape) == tuple(shape)
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            f"jax_camp.{op}: where has shape {mask.shape}, which does not broadcast to x's shape "
            f"{tuple(shape)}"
        )
    return jnp.broadcast_to(mask, shape)


def require_static(op: str, name: str, value) -> None:
    """Raises JAX's ConcretizationTypeError, naming the argument, where ``value`` is traced: the
    kernels' shapes follow from it, so it must be known when tracing."""
    if isinstance(value, jax.core.Tracer):
        raise jax.errors.ConcretizationTypeError(
            value, f"jax_camp.{op}: {name} must be known at trace time; under jax.jit, make it a "
            "static argument (static_argnames)")


def normalize_axes(op: str, axis: Axis, ndim: int) -> tuple[int, ...]:
    """``axis`` as sorted non-negative ints; None means every axis."""
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    for a in axes:
        require_static(op, "axis", a)
    try:
        # operator.index takes what jnp takes as an axis: ints, NumPy integers and concrete
        # 0-d integer arrays. A bool is refused, though Python counts it an int.
        if any(isinstance(a, (bool, np.bool_)) for a in axes):
            raise TypeError
        axes = [operator.index(a) for a in axes]
    except TypeError:
        raise TypeError(
            f"jax_camp.{op}: axis must be an int or a tuple of ints, got {axis!r}") from None
    normalized = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(
                f"jax_camp.{op}: axis {a} is out of bounds for an array of {ndim} dims"
            )
        normalized.append(int(a) % ndim)
    if len(set(normalized)) != len(normalized):
        raise ValueError(f"jax_camp.{op}: axis {axis!r} repeats an axis")
    return tuple(sorted(normalized))


def move_to_last(x: jax.Array, axes: tuple[int, ...]) -> jax.Array:
    """``x`` with ``axes`` moved last and merged into one: the kernels reduce
    over the last dim and treat the others as rows."""
    kept = [d for d in range(x.ndim) if d not in axes]
    if list(axes) != list(range(x.ndim - len(axes), x.ndim)):
        x = jnp.transpose(x, (*kept, *axes))
    kept_shape = x.shape[: len(kept)]
    return x.reshape(*kept_shape, math.prod(x.shape[len(kept):]))


def restore_from_last(y: jax.Array, shape: tuple[int, ...], axes: tuple[int, ...]) -> jax.Array:
    """The inverse of ``move_to_last`` for an output of the input's shape."""
    kept = [d for d in range(len(shape)) if d not in axes]
    moved_shape = tuple(shape[d] for d in (*kept, *axes))
    y = y.reshape(moved_shape)
    if list(axes) != list(range(len(shape) - len(axes), len(shape))):
        y = jnp.transpose(y, np.argsort((*kept, *axes)))
    return y
