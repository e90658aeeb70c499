"""jax_camp.vector_add against x + y."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import jax_camp
from helpers import DTYPES, assert_close, f64, hlo_text, random_normal

SHAPES = [(1, 128), (16, 128), (16, 256), (32, 128), (1024,), (1536,), (127,), (255,), (513,),
          (3, 5, 7), (1_000_003,), (70000, 3), ()]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_matches_x_plus_y(shape, dtype, backend):
    x, y = random_normal(shape, dtype), random_normal(shape, dtype)
    out = jax_camp.vector_add(x, y, backend=backend)
    assert out.shape == shape and out.dtype == dtype
    # Both sides round the exact float32 sum once, so they agree exactly.
    np.testing.assert_array_equal(f64(out), f64(x + y))


def test_unaligned_views(backend):
    """Slices start off a 16-byte boundary: the scalar path must take them."""
    base = random_normal((2, 1001), jnp.float32)
    f = jax.jit(lambda b: jax_camp.vector_add(b[:, 1:], b[:, :-1], backend=backend))
    np.testing.assert_array_equal(f64(f(base)), f64(base[:, 1:] + base[:, :-1]))


@pytest.mark.parametrize("shapes", [((4, 1), (1, 5)), ((3, 4), (4,)), ((2, 3, 4), ()), ((1,), (7, 1))])
def test_broadcasts_like_jnp(shapes, backend):
    x, y = random_normal(shapes[0], jnp.float32), random_normal(shapes[1], jnp.float32)
    out = jax_camp.vector_add(x, y, backend=backend)
    np.testing.assert_array_equal(f64(out), f64(x + y))


def test_promotes_like_jnp(backend):
    x = random_normal((8,), jnp.bfloat16)
    y = random_normal((8,), jnp.float16)
    out = jax_camp.vector_add(x, y, backend=backend)
    assert out.dtype == (x + y).dtype == jnp.float32
    assert jax_camp.vector_add(x, 2.0, backend=backend).dtype == jnp.bfloat16


def test_special_values(backend):
    x = jnp.array([jnp.inf, -jnp.inf, jnp.nan, 1.0, 3e38], jnp.float32)
    y = jnp.array([1.0, jnp.inf, 0.0, -1.0, 3e38], jnp.float32)
    np.testing.assert_array_equal(f64(jax_camp.vector_add(x, y, backend=backend)), f64(x + y))


@pytest.mark.parametrize("shapes", [((0,), (0,)), ((3, 0), (0,)), ((0, 4), (1, 4))])
def test_zero_size(shapes, backend):
    out = jax_camp.vector_add(jnp.zeros(shapes[0]), jnp.zeros(shapes[1]), backend=backend)
    assert out.shape == jnp.broadcast_shapes(*shapes)


def test_jit_vmap(backend):
    x, y = random_normal((4, 6, 50), jnp.float32), random_normal((4, 50), jnp.float32)
    add = functools.partial(jax_camp.vector_add, backend=backend)
    f = jax.jit(jax.vmap(add, in_axes=(1, None)))
    np.testing.assert_array_equal(f64(f(x, y)), f64(jnp.swapaxes(x, 0, 1) + y))
    nested = jax.vmap(jax.vmap(add, (1, None)), (2, 1))
    np.testing.assert_array_equal(f64(nested(x, y)), f64(jnp.transpose(x, (2, 1, 0)) + y.T[:, None, :]))


def test_grad_sums_over_broadcast_dims(backend):
    x, y = random_normal((3, 4), jnp.float32), random_normal((4,), jnp.float32)
    w = random_normal((3, 4), jnp.float32)
    gx, gy = jax.grad(lambda a, b: jnp.sum(jax_camp.vector_add(a, b, backend=backend) * w), (0, 1))(x, y)
    assert_close(gx, f64(w), jnp.float32)
    assert_close(gy, f64(w).sum(0), jnp.float32)
    check_grads(functools.partial(jax_camp.vector_add, backend=backend), (x, y), order=1, modes=["rev"])


def test_forward_mode_and_second_order(backend):
    x = random_normal((4, 6), jnp.float32)
    y = random_normal((6,), jnp.float32)
    f = functools.partial(jax_camp.vector_add, backend=backend)
    _, tangent = jax.jvp(f, (x, y), (x, 3 * y))
    np.testing.assert_array_equal(f64(tangent), f64(x + 3 * y))
    check_grads(f, (x, y), order=2, modes=["fwd", "rev"], atol=1e-2, rtol=1e-2)
    hessian = jax.hessian(lambda a: jnp.sum(f(a, y) ** 2))(x)
    np.testing.assert_allclose(f64(hessian), 2 * np.eye(24).reshape(4, 6, 4, 6))


def test_lowered_hlo_holds_the_kernel(backend):
    if backend == "xla":
        pytest.skip("the xla backend is plain JAX by design")
    text = hlo_text(functools.partial(jax_camp.vector_add, backend=backend), jnp.ones(64), jnp.ones(64))
    assert "custom_call" in text and "vector_add" in text
    assert "stablehlo.add" not in text


def test_rejects_unsupported_dtype(backend):
    with pytest.raises(TypeError, match="jax_camp.vector_add: y has dtype int32; supported dtypes are float32, bfloat16 or float16"):
        jax_camp.vector_add(jnp.ones(3), jnp.ones(3, jnp.int32), backend=backend)


# Operands as jnp.add takes them: arrays of each dtype, a weakly typed array, Python scalars.
PROMOTION_OPERANDS = {
    "float32": lambda: jnp.ones(5, jnp.float32), "bfloat16": lambda: jnp.ones(5, jnp.bfloat16),
    "weak": lambda: jnp.asarray(1.5) + jnp.zeros(5), "int": lambda: 2, "float": lambda: 0.5,
    "bool": lambda: True,
}


@pytest.mark.parametrize("x_kind", PROMOTION_OPERANDS)
@pytest.mark.parametrize("y_kind", PROMOTION_OPERANDS)
def test_promotes_and_keeps_weak_types_as_jnp_add(x_kind, y_kind, backend):
    """A Python int, float or bool takes the other operand's dtype, and the result is weakly
    typed exactly where jnp.add's is (so that it promotes alike afterwards)."""
    x, y = PROMOTION_OPERANDS[x_kind](), PROMOTION_OPERANDS[y_kind]()
    expected = jnp.add(x, y)
    if expected.dtype not in (jnp.float32, jnp.bfloat16, jnp.float16):  # two Python ints or bools
        with pytest.raises(TypeError, match=r"jax_camp.vector_add: x \+ y has dtype"):
            jax_camp.vector_add(x, y, backend=backend)
        return
    # Eagerly, and traced with the operands as constants of the program, as scalars in code are.
    for f in (jax_camp.vector_add, lambda x, y, backend: jax.jit(lambda: jax_camp.vector_add(x, y, backend=backend))()):
        out = f(x, y, backend=backend)
        assert (out.dtype, jax.typeof(out).weak_type) == (expected.dtype, jax.typeof(expected).weak_type)
        np.testing.assert_array_equal(f64(out), f64(expected))
        assert (out + jnp.ones((), jnp.bfloat16)).dtype == (expected + jnp.ones((), jnp.bfloat16)).dtype


def test_a_python_float_keeps_the_array_dtype_under_x64(backend):
    with jax.enable_x64(True):
        out = jax_camp.vector_add(jnp.ones(3, jnp.float32), 1.5, backend=backend)
    assert out.dtype == jnp.float32


def test_rejects_a_list(backend):
    with pytest.raises(TypeError, match="jax_camp.vector_add: x must be an array or a scalar, got list"):
        jax_camp.vector_add([1.0, 2.0], 1.0, backend=backend)


def test_rejects_shapes_that_do_not_broadcast(backend):
    with pytest.raises(ValueError, match=r"jax_camp.vector_add: shapes \(3,\) and \(4,\) do not broadcast"):
        jax_camp.vector_add(jnp.ones(3), jnp.ones(4), backend=backend)
