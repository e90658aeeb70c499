"""Backend selection: names, the environment default, platform errors; calls chained with XLA's."""

from __future__ import annotations

import functools
import importlib.util
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_camp
from conftest import has_gpu
from jax_camp import backends, registration
from jax_camp.ops._spec import MASK_DTYPE, OpSpec
from jax_camp.ops.softmax import SOFTMAX
from helpers import f64, random_normal

OPS = {
    "copy": lambda x, backend: jax_camp.copy(x, backend=backend),
    "vector_add": lambda x, backend: jax_camp.vector_add(x, x, backend=backend),
    "reduce_sum": lambda x, backend: jax_camp.reduce_sum(x, backend=backend),
    "softmax": lambda x, backend: jax_camp.softmax(x, backend=backend),
}


@pytest.mark.parametrize("op", OPS)
def test_unknown_backend_lists_choices(op):
    with pytest.raises(ValueError, match=r"backend='triton' is not a jax_camp backend; choose None or one of \('cuda', 'cpu', 'tilelang', 'xla'\)"):
        OPS[op](jnp.ones((2, 3)), "triton")


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("backend", [0, True, ("cuda",)])
def test_a_backend_of_the_wrong_type_is_a_type_error(op, backend):
    with pytest.raises(TypeError, match="backend must be None or a str"):
        OPS[op](jnp.ones((2, 3)), backend)


def test_environment_sets_the_default(monkeypatch):
    x = jnp.ones((2, 8))
    monkeypatch.setenv("JAX_CAMP_BACKEND", "xla")
    assert SOFTMAX.ffi_target not in jax.jit(jax_camp.softmax).lower(x).as_text()
    monkeypatch.setenv("JAX_CAMP_BACKEND", "nope")
    with pytest.raises(ValueError, match="JAX_CAMP_BACKEND='nope'"):
        jax_camp.softmax(x)


def test_require_backend_fails_where_a_backend_would_skip():
    """conftest.py's --require-backend: a backend this machine cannot run (cuda without a GPU,
    cpu where the default device is a GPU) fails the op tests instead of skipping them."""
    missing = "cpu" if has_gpu() else "cuda"
    test = f"{Path(__file__).resolve().parent / 'test_copy.py'}::test_zero_size"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test,
               f"--backend={missing}"]
    # From tests/, not the repository root, whose jax_camp/ is the uncompiled source.
    here = Path(__file__).resolve().parent
    skipped = subprocess.run(command, cwd=here, capture_output=True, text=True, timeout=300)
    assert skipped.returncode == 0 and "skipped" in skipped.stdout, skipped.stdout[-2000:]
    failed = subprocess.run(command + ["--require-backend"], cwd=here, capture_output=True,
                            text=True, timeout=300)
    assert failed.returncode != 0 and "(--require-backend)" in failed.stdout, failed.stdout[-2000:]


@pytest.mark.parametrize("backend", ["cuda", "tilelang"])
@pytest.mark.parametrize("op", OPS)
def test_gpu_backends_lowered_for_cpu_say_a_gpu_is_needed(op, backend):
    if backend == "tilelang" and has_gpu() and importlib.util.find_spec("tilelang") is None:
        pytest.skip("without TileLang, backend='tilelang' fails first with an ImportError")
    cpu = jax.devices("cpu")[0]
    x = jax.device_put(jnp.ones((2, 8)), cpu)
    with jax.default_device(cpu), pytest.raises(ValueError, match=f"backend='{backend}' needs a GPU"):
        jax.jit(functools.partial(OPS[op], backend=backend))(x)


@pytest.mark.skipif(not has_gpu(), reason="needs a GPU")
def test_cpu_backend_lowered_for_gpu_says_so():
    with pytest.raises(ValueError, match="backend='cpu' needs the CPU"):
        jax.jit(functools.partial(jax_camp.softmax, backend="cpu"))(jnp.ones((2, 8)))


@pytest.mark.parametrize("op", OPS)
def test_cuda_backend_of_a_build_without_cuda_says_so(monkeypatch, op):
    # As on a GPU machine whose jax_camp was built without nvcc: an explicit backend="cuda"
    # is a clear error when traced, not XLA's missing custom call target.
    monkeypatch.setattr(registration, "BUILT_WITH_CUDA", False)
    monkeypatch.setattr(backends, "_has_gpu", lambda: True)
    with pytest.raises(ValueError, match="backend='cuda' needs jax_camp's CUDA kernels.*nvcc"):
        jax.jit(functools.partial(OPS[op], backend="cuda")).trace(jnp.ones((2, 8)))


def test_default_backend_lowers_for_either_platform():
    """One jitted function, the platform's own kernel wherever it is compiled."""
    f = jax.jit(jax_camp.softmax)
    cpu = jax.devices("cpu")[0]
    x = jax.device_put(jnp.arange(8.0).reshape(2, 4), cpu)
    with jax.default_device(cpu):
        assert SOFTMAX.ffi_target in f.lower(x).as_text()
        y_cpu = f(x)
    if has_gpu():
        y_gpu = f(jax.device_put(x, jax.devices("gpu")[0]))
        assert jnp.allclose(jax.device_get(y_gpu), jax.device_get(y_cpu), atol=1e-6)


# Two calls of ours back to back, then an elementwise op of XLA's, each reading
# the output of the one before: every kernel must run on XLA's stream (the
# handler's, or the TileLang bridge's), after the one that wrote its input and
# before the one that reads its output. 16 MiB a call keeps each kernel
# running for several waves of blocks; a kernel that read a stale or
# half-written buffer would be off by whole values, far past the tolerance for
# the ops' different rounding. Each step's result broadcasts against
# (4096, 1024) and keeps the chain bounded: reduce_sum's sums of 65536 values
# are scaled so that the part every row shares does not grow from step to
# step, which would magnify the two sides' rounding.
CHAINED_STEPS = {
    "copy": lambda y, b: jax_camp.copy(jax_camp.copy(y, backend=b), backend=b),
    "vector_add": lambda y, b: jax_camp.vector_add(
        jax_camp.vector_add(y, y, backend=b), y, backend=b),
    "reduce_sum": lambda y, b: jnp.repeat(jax_camp.reduce_sum(
        jax_camp.reduce_sum(y, backend=b).reshape(64, 64), backend=b), 64)[:, None] / 16384,
    "softmax": lambda y, b: jax_camp.softmax(jax_camp.softmax(y, backend=b), backend=b) * 1024,
}


@pytest.mark.parametrize("op", CHAINED_STEPS)
def test_chained_calls_read_each_others_outputs(op, backend):
    def chain(backend):
        def run(x):
            y = x
            for _ in range(6):
                y = 0.5 * x + 0.25 * CHAINED_STEPS[op](y, backend)
            return y
        return jax.jit(run)

    x = random_normal((4096, 1024), jnp.float32)
    np.testing.assert_allclose(f64(chain(backend)(x)), f64(chain("xla")(x)), rtol=1e-4, atol=1e-4)


# Every kernel of every op, forward and backward: the masked ops and a gradient included.
KERNEL_CALLS = {
    "copy": lambda x, b: jax_camp.copy(x, backend=b),
    "vector_add": lambda x, b: jax_camp.vector_add(x, 2.0 * x, backend=b),
    "reduce_sum": lambda x, b: jax_camp.reduce_sum(x, axis=1, backend=b),
    "softmax": lambda x, b: jax_camp.softmax(x, where=x > -1, backend=b),
    "log_softmax": lambda x, b: jax_camp.log_softmax(x, where=x > -1, backend=b),
    "softmax_grad": lambda x, b: jax.grad(
        lambda x: jnp.sum(jax_camp.softmax(x, backend=b) * jnp.cos(x)))(x),
    "log_softmax_grad": lambda x, b: jax.grad(
        lambda x: jnp.sum(jax_camp.log_softmax(x, backend=b) * jnp.cos(x)))(x),
}


@pytest.mark.parametrize("op", KERNEL_CALLS)
def test_calls_outside_jit_and_under_disable_jit_run_the_kernels(op, backend):
    """Outside jit each kernel runs as its own compiled call, as JAX's primitives do, also under
    jax.disable_jit (a debugging switch), where a kernel that jitted its own bind recursed."""
    x = random_normal((8, 40), jnp.float32)
    expected = f64(jax.jit(functools.partial(KERNEL_CALLS[op], b=backend))(x))
    np.testing.assert_allclose(f64(KERNEL_CALLS[op](x, backend)), expected, rtol=1e-6, atol=1e-6)
    with jax.disable_jit():
        np.testing.assert_allclose(f64(KERNEL_CALLS[op](x, backend)), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", KERNEL_CALLS)
def test_traced_calls_leak_no_tracer(op, backend):
    """Under jax.checking_leaks (a debugging switch) tracing a kernel call leaves no tracer
    behind: custom_partitioning's static arguments held the operands' tracers in a frame where
    the check found them, on jax 0.12."""
    x = random_normal((8, 40), jnp.float32)
    with jax.checking_leaks():
        jax.jit(functools.partial(KERNEL_CALLS[op], b=backend)).lower(x)


@pytest.mark.parametrize("name", registration.SPECS)
def test_each_kernel_description_calls_its_target_for_its_result(name):
    spec = registration.SPECS[name]
    # On the CPU device, whatever the default device is: the cpu handlers run anywhere.
    cpu = jax.devices("cpu")[0]
    operands = [jax.device_put(random_normal((3, 40), jnp.float32), cpu) for _ in range(spec.arity)]
    if spec.mask_operand:
        operands[-1] = (operands[-1] > 0).astype(MASK_DTYPE)
    call = jax.jit(lambda *xs: backends.kernel_call(spec, "cpu", *xs))
    assert f"stablehlo.custom_call @{spec.ffi_target}(" in call.lower(*operands).as_text()
    out = call(*operands)
    assert (out.shape, out.dtype) == (spec.result(operands[0]).shape, spec.result(operands[0]).dtype)


def test_a_description_without_a_compiled_handler_says_so():
    spec = OpSpec(name="missing", arity=1, tilelang_module="copy")
    with pytest.raises(RuntimeError, match="no cpu handler for kernel 'missing'"):
        registration.register(spec)
    assert "missing" not in registration.SPECS
