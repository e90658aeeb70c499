"""jax.export of functions that call jax_camp: serialized, then called in a fresh process."""

from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

import jax_camp
from helpers import f64, on_this_machine, random_normal
from jax_camp import registration
from jax_camp.ops import _spec

if importlib.util.find_spec("flatbuffers") is None:
    pytest.skip(
        "jax.export's serialization needs flatbuffers: pip install .[export]", allow_module_level=True
    )

# Loads an exported program and its inputs (x0, w0, x1, w1, ...), calls it on each pair, and
# saves what it returns (arr_0, arr_1, ...).
_CALL_IN_A_FRESH_PROCESS = """
import sys
import numpy as np
from jax import export
import jax_camp  # registers the FFI targets the program calls
exported = export.deserialize(open(sys.argv[1], "rb").read())
inputs = np.load(sys.argv[2])
calls = range(len(inputs.files) // 2)
outputs = [np.asarray(exported.call(inputs[f"x{i}"], inputs[f"w{i}"])) for i in calls]
np.savez(sys.argv[3], *outputs)
"""


def _program(backend):
    """Every op, forward mode and reverse mode, in one function of (x, w)."""

    def f(x, w):
        softmax = lambda v: jax_camp.softmax(v, backend=backend)
        log_softmax = lambda v: jax_camp.log_softmax(v, backend=backend)
        dx = jax.grad(lambda v: jnp.sum(softmax(v) * w + log_softmax(v) * w))(x)
        _, tangent = jax.jvp(lambda v: softmax(v) + log_softmax(v), (x,), (w,))
        masked = jax_camp.softmax(x, where=w > 0, backend=backend) + jnp.where(
            w > 0, jax_camp.log_softmax(x, where=w > 0, backend=backend), 0.0)
        total = jax_camp.reduce_sum(jax_camp.copy(x, backend=backend), backend=backend)
        return jax_camp.vector_add(dx + tangent + masked, total[:, None], backend=backend)

    return f


# The shape a program is exported for, and the shapes it is called with: "b, c" is
# shape-polymorphic, one program for every (rows, cols); on a GPU, its CUDA forwards claim the
# rows of 640 x 131_080 from a row counter (test_symbolic_dims_bring_the_row_counter...).
_SHAPES = {"concrete": ("6, 40", [(6, 40)]),
           "symbolic": ("b, c", on_this_machine([(6, 40), (3, 7), (1, 1), (640, 131_080)]))}


@pytest.mark.parametrize("shapes", list(_SHAPES))
@pytest.mark.parametrize("platforms", [None, ("cpu", "cuda")], ids=["this-platform", "cpu+cuda"])
def test_round_trip_in_a_fresh_process(platforms, shapes, backend, tmp_path):
    if backend == "tilelang":
        pytest.skip("TileLang's targets are compiled per process (test_tilelang_targets_do_not_export)")
    if platforms and backend is not None and backend != "xla":
        pytest.skip(f"backend={backend!r} lowers for one platform; cpu+cuda takes the default")
    exported_shape, call_shapes = _SHAPES[shapes]
    arg = jax.ShapeDtypeStruct(export.symbolic_shape(exported_shape), jnp.float32)
    f = _program(backend)
    exported = export.export(jax.jit(f), disabled_checks=jax_camp.export_checks(), platforms=platforms)(arg, arg)
    if backend != "xla":  # the program calls every kernel
        text = exported.mlir_module()
        for spec in registration.SPECS.values():
            assert spec.ffi_target in text, spec.ffi_target
    (tmp_path / "program.bin").write_bytes(exported.serialize())
    inputs = {}
    for i, shape in enumerate(call_shapes):
        inputs[f"x{i}"] = np.asarray(random_normal(shape, jnp.float32, scale=3.0))
        inputs[f"w{i}"] = np.asarray(random_normal(shape, jnp.float32))
    np.savez(tmp_path / "inputs.npz", **inputs)
    # From tests/, not the repository root, whose jax_camp/ is the uncompiled source.
    run = subprocess.run(
        [sys.executable, "-c", _CALL_IN_A_FRESH_PROCESS, str(tmp_path / "program.bin"),
         str(tmp_path / "inputs.npz"), str(tmp_path / "out.npz")],
        cwd=Path(__file__).resolve().parent, env=dict(os.environ), capture_output=True, text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    outputs = np.load(tmp_path / "out.npz")
    for i, shape in enumerate(call_shapes):
        got = outputs[f"arr_{i}"]
        assert got.shape == shape
        np.testing.assert_allclose(got, f64(jax.jit(f)(inputs[f"x{i}"], inputs[f"w{i}"])),
                                   rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shapes", list(_SHAPES))
def test_serialized_vjp_differentiates_to_second_order(shapes, backend):
    """``serialize(vjp_order=2)`` carries the backward kernels and their own backward, so a
    deserialized program has the gradients of the original, to second order."""
    if backend == "tilelang":
        pytest.skip("TileLang's targets are compiled per process (test_tilelang_targets_do_not_export)")
    exported_shape, call_shapes = _SHAPES[shapes]
    arg = jax.ShapeDtypeStruct(export.symbolic_shape(exported_shape), jnp.float32)

    def loss(x):
        y = jax_camp.softmax(x, backend=backend) + jax_camp.log_softmax(x, backend=backend)
        masked = jax_camp.softmax(x, where=x > 0, backend=backend)
        return jnp.sum(jax_camp.vector_add(y, masked, backend=backend) * jnp.cos(x))

    exported = export.export(jax.jit(loss), disabled_checks=jax_camp.export_checks())(arg)
    loaded = export.deserialize(exported.serialize(vjp_order=2))
    if backend != "xla":
        vjp_text = loaded.vjp().mlir_module()
        for name in ("softmax_backward", "log_softmax_backward"):
            assert registration.SPECS[name].ffi_target in vjp_text, name
    x = random_normal(call_shapes[0], jnp.float32, scale=3.0)
    np.testing.assert_allclose(f64(jax.grad(loaded.call)(x)), f64(jax.grad(loss)(x)), rtol=1e-6, atol=1e-6)
    second = lambda g: jax.grad(lambda v: jnp.sum(g(v) * jnp.sin(v)))
    np.testing.assert_allclose(f64(second(jax.grad(loaded.call))(x)), f64(second(jax.grad(loss))(x)),
                               rtol=1e-5, atol=1e-5)


def test_export_checks_name_every_kernel():
    checks = jax_camp.export_checks()
    assert checks == [
        export.DisabledSafetyCheck.custom_call(spec.ffi_target) for spec in registration.SPECS.values()
    ]
    assert all(f"_v{_spec.FFI_VERSION}_" in spec.ffi_target for spec in registration.SPECS.values())


def test_a_program_of_another_ffi_version_fails_clearly(backend, monkeypatch):
    if backend in ("xla", "tilelang"):
        pytest.skip("only the CUDA and host kernels export")
    x = random_normal((3, 16), jnp.float32)
    monkeypatch.setattr(_spec, "FFI_VERSION", 999)
    exported = export.export(
        jax.jit(lambda v: jax_camp.softmax(v * 2.0, backend=backend)),
        disabled_checks=jax_camp.export_checks(),
    )(x)
    monkeypatch.undo()
    with pytest.raises(Exception, match="jax_camp_v999_softmax"):
        export.deserialize(exported.serialize()).call(x)


def test_tilelang_targets_do_not_export(backend):
    if backend != "tilelang":
        pytest.skip("a TileLang test")
    x = random_normal((3, 16), jnp.float32)
    with pytest.raises(ValueError, match="custom call"):
        export.export(
            jax.jit(lambda v: jax_camp.softmax(v, backend=backend)),
            disabled_checks=jax_camp.export_checks(),
        )(x)


@pytest.mark.parametrize("shape,counter", [("b, 128", False), ("b, 40000", True), ("16, c", False),
                                           ("17, c", True), ("b, c", True)])
def test_symbolic_dims_bring_the_row_counter_wherever_some_size_needs_it(shape, counter, backend):
    """A symbolic dim is known only when the exported program runs, so the unmasked forward's
    call brings the row counter (test_softmax.py's ROW_COUNTER_CASES) if any size of that dim
    would: more than 16 rows, of more than 32768 values."""
    if backend in ("xla", "tilelang"):
        pytest.skip("the row counter is the CUDA and host kernels' scratch")
    arg = jax.ShapeDtypeStruct(export.symbolic_shape(shape), jnp.float32)
    for op in (jax_camp.softmax, jax_camp.log_softmax):
        exported = export.export(jax.jit(functools.partial(op, backend=backend)),
                                 disabled_checks=jax_camp.export_checks())(arg)
        text = exported.mlir_module()
        call, = [line for line in text.splitlines() if "custom_call @jax_camp_" in line]
        assert ("tensor<1xui32>" in call) == counter, call


def test_tilelang_kernels_refuse_symbolic_shapes():
    """A TileLang kernel is compiled for its shape: a symbolic one is a clear ValueError when
    traced, wherever TileLang is installed (no GPU needed)."""
    pytest.importorskip("tilelang")
    pytest.importorskip("jax_tvm_ffi")
    from jax_camp.tilelang_kernels import bridge

    x = jax.ShapeDtypeStruct(export.symbolic_shape("b, 16"), jnp.float32)
    for spec in registration.SPECS.values():
        operands = [x] * spec.arity
        if spec.mask_operand:
            operands[-1] = jax.ShapeDtypeStruct(x.shape, jnp.bool_)
        with pytest.raises(ValueError, match=rf"TileLang {spec.name} .* is symbolic"):
            export.export(jax.jit(functools.partial(bridge.kernel_call, spec)))(*operands)
