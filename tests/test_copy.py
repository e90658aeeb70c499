"""jax_camp.copy: a new array equal to x."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import jax_camp
from helpers import DTYPES, f64, hlo_text, random_normal

SHAPES = [(1, 128), (16, 128), (16, 256), (32, 128), (1024,), (1536,), (127,), (255,), (513,),
          (3, 5, 7), (1_000_003,), (70000, 3), ()]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_equals_input(shape, dtype, backend):
    x = random_normal(shape, dtype)
    y = jax_camp.copy(x, backend=backend)
    assert y.shape == shape and y.dtype == dtype
    np.testing.assert_array_equal(np.asarray(y.view(jnp.uint16) if dtype != jnp.float32 else y),
                                  np.asarray(x.view(jnp.uint16) if dtype != jnp.float32 else x))


def test_keeps_every_bit(backend):
    """NaN payloads, signed zeros and infinities come through unchanged."""
    bits = jnp.array([0x7FC00001, 0xFFC00000, 0x80000000, 0x7F800000, 0x00000001, 0x3F800000], jnp.uint32)
    x = jax.lax.bitcast_convert_type(bits, jnp.float32)
    y = jax_camp.copy(x, backend=backend)
    np.testing.assert_array_equal(np.asarray(jax.lax.bitcast_convert_type(y, jnp.uint32)), np.asarray(bits))


def test_unaligned_view(backend):
    base = random_normal((1001,), jnp.bfloat16)
    y = jax.jit(lambda b: jax_camp.copy(b[1:], backend=backend))(base)
    np.testing.assert_array_equal(f64(y), f64(base[1:]))


def test_returns_a_new_buffer(backend):
    x = random_normal((4, 8), jnp.float32)
    y = jax_camp.copy(x, backend=backend)
    x.delete()
    assert np.isfinite(np.asarray(y)).all()


@pytest.mark.parametrize("shape", [(0,), (3, 0)])
def test_zero_size(shape, backend):
    y = jax_camp.copy(jnp.zeros(shape, jnp.float16), backend=backend)
    assert y.shape == shape and y.dtype == jnp.float16


def test_jit_vmap_grad(backend):
    x = random_normal((4, 6, 5), jnp.float32)
    f = functools.partial(jax_camp.copy, backend=backend)
    np.testing.assert_array_equal(f64(jax.jit(jax.vmap(jax.vmap(f, 1), 2))(x)), f64(jnp.transpose(x, (2, 1, 0))))
    w = random_normal((4, 6, 5), jnp.float32)
    g = jax.grad(lambda v: jnp.sum(f(v) * w))(x)
    np.testing.assert_array_equal(f64(g), f64(w))


def test_forward_mode_and_second_order(backend):
    x = random_normal((4, 6), jnp.float32)
    f = functools.partial(jax_camp.copy, backend=backend)
    _, tangent = jax.jvp(f, (x,), (2 * x,))
    np.testing.assert_array_equal(f64(tangent), f64(2 * x))
    check_grads(f, (x,), order=2, modes=["fwd", "rev"], atol=1e-2, rtol=1e-2)
    if backend != "xla":  # the tangent is copied by the kernel too
        assert hlo_text(lambda v: jax.jvp(f, (v,), (v,)), x).count("custom_call @") == 2


def test_keeps_a_weak_type_as_jnp_copy(backend):
    weak = jnp.asarray(1.5) + jnp.zeros(4)
    for x in (weak, 1.5, jnp.ones(4)):
        out, expected = jax_camp.copy(x, backend=backend), jnp.copy(x)
        assert (out.dtype, jax.typeof(out).weak_type) == (expected.dtype, jax.typeof(expected).weak_type)


def test_lowered_hlo_holds_the_kernel(backend):
    if backend == "xla":
        pytest.skip("the xla backend is plain JAX by design")
    text = hlo_text(functools.partial(jax_camp.copy, backend=backend), jnp.ones(64))
    assert "custom_call" in text and "copy" in text


def test_rejects_unsupported_dtype(backend):
    with pytest.raises(TypeError, match="jax_camp.copy: x has dtype int8; supported dtypes are float32, bfloat16 or float16"):
        jax_camp.copy(jnp.ones(3, jnp.int8), backend=backend)
