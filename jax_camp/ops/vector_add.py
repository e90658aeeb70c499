"""jax_camp.vector_add: x + y, with jnp's broadcasting and type promotion."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.interpreters import ad

from jax_camp import backends, registration
from jax_camp.ops import _checks
from jax_camp.ops._spec import OpSpec

# The kernel adds operands of one shape and dtype: broadcasting and promotion
# happen before it, in JAX.
VECTOR_ADD = registration.register(OpSpec(name="vector_add", arity=2, tilelang_module="vector_add"))


def vector_add(
    x: jax.typing.ArrayLike, y: jax.typing.ArrayLike, *, backend: str | None = None
) -> jax.Array:
    """Elementwise ``x + y``, as ``jnp.add``.

    Args:
      x, y: float32, bfloat16 or float16 arrays, or Python scalars, whose
        shapes broadcast together. They promote as in ``jnp.add``: a Python
        int, float or bool takes the other operand's dtype, and the result is
        weakly typed where jnp.add's would be.
      backend: None (the platform's kernels), "cuda", "cpu", "tilelang" or
        "xla"; see ``jax_camp.backends``.

    Raises:
      TypeError: for an integer or other unsupported array, or operands that
        promote to a dtype without a kernel (two Python ints).
      ValueError: if the shapes do not broadcast.
    """
    backend = backends.resolve(backend)
    operands = []
    for name, v in (("x", x), ("y", y)):
        array = _checks.array_like("vector_add", name, v)
        # A Python scalar (weakly typed once traced) takes the other operand's dtype.
        if not isinstance(v, (bool, int, float)) and not jax.typeof(array).weak_type:
            _checks.check_dtype("vector_add", name, array.dtype)
        operands.append(array)
    x, y = operands
    _checks.check_dtype("vector_add", "x + y", jnp.result_type(x, y))
    try:
        shape = jnp.broadcast_shapes(x.shape, y.shape)
    except ValueError:
        raise ValueError(
            f"jax_camp.vector_add: shapes {x.shape} and {y.shape} do not broadcast together"
        ) from None
    return _vector_add(x, y, shape, backend)


@functools.partial(jax.jit, static_argnums=(2, 3))
def _vector_add(x: jax.Array, y: jax.Array, shape: tuple[int, ...], backend: str) -> jax.Array:
    if not backends.uses_kernels(backend):
        return x + y
    expected = jax.eval_shape(jnp.add, x, y)  # jnp.add's dtype and weak type, to the letter
    dtype, weak = expected.dtype, expected.weak_type
    if any(d == 0 for d in shape):
        return _checks.weakly_typed_as(jnp.empty(shape, dtype), weak)
    # Broadcasting happens here, in JAX, so that the kernel sees equal shapes
    # and grad sums the cotangent over broadcast dims by itself.
    xs = jnp.broadcast_to(x.astype(dtype), shape)
    ys = jnp.broadcast_to(y.astype(dtype), shape)
    return _checks.weakly_typed_as(backends.kernel_call(VECTOR_ADD, backend, xs, ys), weak)


# The sum is linear: its tangent is the sum of the tangents (by the kernel), and its
# cotangent reaches both operands.
ad.deflinear2(backends.primitive(VECTOR_ADD), lambda ct, x, y, *, backend: [ct, ct])
