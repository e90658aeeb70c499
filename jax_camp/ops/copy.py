"""jax_camp.copy: a new array equal to x, written by jax_camp's copy kernel."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.interpreters import ad

from jax_camp import backends, registration
from jax_camp.ops import _checks
from jax_camp.ops._spec import OpSpec

COPY = registration.register(OpSpec(name="copy", arity=1, tilelang_module="copy"))


def copy(x: jax.typing.ArrayLike, *, backend: str | None = None) -> jax.Array:
    """A copy of ``x``: same shape, dtype and values, in a new buffer, weakly typed where ``x``
    is (as ``jnp.copy``).

    Args:
      x: a float32, bfloat16 or float16 array, or a Python float.
      backend: None (the platform's kernels), "cuda", "cpu", "tilelang" or
        "xla"; see ``jax_camp.backends``.
    """
    backend = backends.resolve(backend)
    return _copy(_checks.float_array("copy", "x", x), backend)


@functools.partial(jax.jit, static_argnums=(1,))
def _copy(x: jax.Array, backend: str) -> jax.Array:
    if not backends.uses_kernels(backend):
        return jnp.copy(x)
    if x.size == 0:
        return jnp.empty_like(x)
    return _checks.weakly_typed_as(backends.kernel_call(COPY, backend, x), jax.typeof(x).weak_type)


# copy is linear: its tangent is the copy of the tangent, its cotangent passes through.
ad.deflinear2(backends.primitive(COPY), lambda ct, x, *, backend: [ct])
