"""jax_camp ops on sharded arrays: jit over 1-D and 2-D meshes, and shard_map.

A mesh needs several devices, and XLA fixes the number of host devices when
jax is first imported, which the other test modules have done by now. So this
file runs again in a fresh pytest process with
``--xla_force_host_platform_device_count=8`` that collects the ``mesh_test_*``
functions instead, started beside the other tests (tests/background_runs.py);
``test_on_8_host_devices`` waits for it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import jax_camp
from background_runs import BackgroundRuns
from helpers import assert_close, progress, random_normal, sum_scale
from jax_camp import registration
from jax_camp.ops.softmax import SOFTMAX


def _mesh_tests(_: Path, config: pytest.Config) -> list[str]:
    backend = config.getoption("--backend")
    if backend in ("cuda", "tilelang"):
        return [sys.executable, "-c", "pass"]  # test_on_8_host_devices skips
    return [
        sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
        "-o", "python_functions=mesh_test_*", f"--backend={backend}", str(Path(__file__).resolve()),
    ]


# Set in the mesh tests' own process, which must not start another.
_MESH_PROCESS = "JAX_CAMP_MESH_TEST_PROCESS"

# From tests/, not the repository root: `python -m pytest` puts its working directory on
# sys.path, and the root's jax_camp/ is the uncompiled source.
RUNS = None if os.environ.get(_MESH_PROCESS) else BackgroundRuns(
    __name__,
    {"mesh tests": _mesh_tests},
    cwd=Path(__file__).resolve().parent,
    env={
        **os.environ,
        _MESH_PROCESS: "1",
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip(),
    },
)


def test_on_8_host_devices(backend, request):
    if backend in ("cuda", "tilelang"):
        pytest.skip("the mesh tests run on 8 host (CPU) devices; examples/sharded_softmax.py covers GPUs")
    RUNS.wait(request.config, lambda line: progress(request.config, line))


@pytest.mark.parametrize("name", registration.SPECS)
def test_row_kernels_name_their_reduced_dim_and_combine_it(name):
    """A kernel along rows has "i" for the row in its rule and a way to join a row split over
    devices; an elementwise one has neither."""
    spec = registration.SPECS[name]
    assert ("i" in spec.sharding_rule) == spec.along_rows
    assert (spec.combine_across_devices is not None) == spec.along_rows
    assert set(spec.reduction_factors) <= {"i"}
    assert spec.sharding_rule.count(",") == spec.arity - 1


# The tests below run in that process.

MESHES = {"1d": ((8,), ("d",)), "2d": ((4, 2), ("a", "b"))}
SHAPE = (8, 8, 16)

# (op, reduced dim or None, function of (x, y, backend)).
OPS = {
    "copy": (None, lambda x, y, b: jax_camp.copy(x, backend=b)),
    "vector_add": (None, lambda x, y, b: jax_camp.vector_add(x, y, backend=b)),
    "reduce_sum": (2, lambda x, y, b: jax_camp.reduce_sum(x, backend=b)),
    "reduce_sum_axis0": (0, lambda x, y, b: jax_camp.reduce_sum(x, axis=0, backend=b)),
    "softmax": (2, lambda x, y, b: jax_camp.softmax(x, backend=b)),
    "softmax_axis1": (1, lambda x, y, b: jax_camp.softmax(x, axis=1, backend=b)),
    "log_softmax": (2, lambda x, y, b: jax_camp.log_softmax(x, backend=b)),
    "log_softmax_axis1": (1, lambda x, y, b: jax_camp.log_softmax(x, axis=1, backend=b)),
    "softmax_where": (2, lambda x, y, b: jax_camp.softmax(x, where=y > 0, backend=b)),
    "log_softmax_where_axis1": (
        1, lambda x, y, b: jax_camp.log_softmax(x, axis=1, where=y > 0, backend=b)),
}

# Shardings of SHAPE per mesh. Each op reduces a different dim (if any), so
# a spec shards only rows for some ops and the reduced dim for others.
SPECS = {
    "1d": [P("d"), P(None, None, "d"), P(None, "d")],
    "2d": [P("a", None, "b"), P(("a", "b")), P("b", "a"), P(None, None, ("a", "b"))],
}


def _mesh(name: str, axis_type: AxisType = AxisType.Auto) -> jax.sharding.Mesh:
    shape, names = MESHES[name]
    return jax.make_mesh(shape, names, axis_types=(axis_type,) * len(names))


def _cases() -> list:
    return [
        pytest.param(mesh_name, spec, id=f"{mesh_name}-{spec}")
        for mesh_name in MESHES
        for spec in SPECS[mesh_name]
    ]


def _padded(spec: P, ndim: int) -> tuple:
    return tuple(spec) + (None,) * (ndim - len(spec))


def _shards_reduced_dim(spec: P, reduced: int | None) -> bool:
    return reduced is not None and _padded(spec, len(SHAPE))[reduced] is not None


def _expected_spec(spec: P, reduced: int | None, keeps_reduced_dim: bool) -> P:
    entries = _padded(spec, len(SHAPE))
    if reduced is not None and not keeps_reduced_dim:
        entries = entries[:reduced] + entries[reduced + 1:]
    return P(*entries)


def _inputs(mesh, spec):
    x = random_normal(SHAPE, jnp.float32, scale=3.0)
    y = random_normal(SHAPE, jnp.float32)
    sharding = NamedSharding(mesh, spec)
    return x, y, jax.device_put(x, sharding), jax.device_put(y, sharding)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("mesh_name,spec", _cases())
def mesh_test_forward_partitions(mesh_name, spec, op, backend):
    mesh = _mesh(mesh_name)
    reduced, f = OPS[op]
    x, y, xs, ys = _inputs(mesh, spec)
    jitted = jax.jit(lambda a, b: f(a, b, backend))
    compiled = jitted.lower(xs, ys).compile()
    out = compiled(xs, ys)

    assert_close(out, f(x, y, backend), jnp.float32)
    expected = _expected_spec(spec, reduced, keeps_reduced_dim="softmax" in op)
    assert out.sharding.is_equivalent_to(NamedSharding(mesh, expected), out.ndim), out.sharding
    hlo = compiled.as_text()
    assert "all-gather" not in hlo
    if backend != "xla":
        assert "jax_camp_" in hlo
        # Not even a sharded reduced dim is gathered: the devices' partial
        # results are combined by all-reduces of one value per row.
        assert ("all-reduce" in hlo) == _shards_reduced_dim(spec, reduced)


GRADS = {
    "copy": lambda x, y, b: (jax_camp.copy(x, backend=b) * y).sum(),
    "vector_add": lambda x, y, b: (jax_camp.vector_add(x, y, backend=b) ** 2).sum(),
    "reduce_sum": lambda x, y, b: (jax_camp.reduce_sum(x, backend=b) ** 2).sum(),
    "softmax": lambda x, y, b: (jax_camp.softmax(x, backend=b) * y).sum(),
    "softmax_axis0": lambda x, y, b: (jax_camp.softmax(x, axis=0, backend=b) * y).sum(),
    "log_softmax": lambda x, y, b: (jax_camp.log_softmax(x, backend=b) * y).sum(),
    "log_softmax_axis0": lambda x, y, b: (jax_camp.log_softmax(x, axis=0, backend=b) * y).sum(),
    "softmax_where": lambda x, y, b: (jax_camp.softmax(x, where=y > 0, backend=b) * y).sum(),
    "log_softmax_where": lambda x, y, b: jnp.where(
        y > 0, jax_camp.log_softmax(x, where=y > 0, backend=b) * y, 0.0).sum(),
}


@pytest.mark.parametrize("op", GRADS)
@pytest.mark.parametrize("mesh_name,spec", _cases())
def mesh_test_gradients_partition(mesh_name, spec, op, backend):
    mesh = _mesh(mesh_name)
    x, y, xs, ys = _inputs(mesh, spec)
    grad = jax.jit(jax.grad(GRADS[op], argnums=(0, 1)), static_argnums=2)
    compiled = grad.lower(xs, ys, backend).compile()
    dx, dy = compiled(xs, ys)
    want_dx, want_dy = grad(x, y, backend)

    assert_close(dx, want_dx, jnp.float32)
    assert_close(dy, want_dy, jnp.float32)
    reduced = {"reduce_sum": 2, "softmax": 2, "softmax_axis0": 0, "log_softmax": 2,
               "log_softmax_axis0": 0, "softmax_where": 2, "log_softmax_where": 2}.get(op)
    if not _shards_reduced_dim(spec, reduced):
        assert dx.sharding.is_equivalent_to(xs.sharding, dx.ndim), dx.sharding
        assert "all-gather" not in compiled.as_text()


# The elementwise ops' tangents are their own kernels on the tangents, partitioned as above.
@pytest.mark.parametrize("op", ["reduce_sum", "softmax", "softmax_axis1", "log_softmax",
                                "log_softmax_axis1", "softmax_where", "log_softmax_where_axis1"])
@pytest.mark.parametrize("mesh_name,spec", _cases())
def mesh_test_forward_mode_partitions(mesh_name, spec, op, backend):
    mesh = _mesh(mesh_name)
    _, f = OPS[op]
    x, y, xs, ys = _inputs(mesh, spec)
    jvp = jax.jit(lambda a, b: jax.jvp(lambda v: f(v, b, backend), (a,), (b,))[1])
    compiled = jvp.lower(xs, ys).compile()
    assert_close(compiled(xs, ys), jvp(x, y), jnp.float32)
    assert "all-gather" not in compiled.as_text()


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("mesh_name,spec", _cases())
def mesh_test_second_order_partitions(mesh_name, spec, op, backend):
    mesh = _mesh(mesh_name)
    x, y, xs, ys = _inputs(mesh, spec)
    f = getattr(jax_camp, op)

    def grad_norm(a, b):
        return (jax.grad(lambda v: (f(v, backend=backend) * b).sum())(a) ** 2).sum()

    second = jax.jit(jax.grad(grad_norm))
    want = second(x, y)
    # log_softmax's sharded forward joins the blocks' log-sum-exps with one float32 rounding
    # more than one device makes, which the second derivative magnifies: checked relative to
    # the largest entry.
    scale = 1.0 if op == "softmax" else float(np.abs(want).max())
    assert_close(second.lower(xs, ys).compile()(xs, ys), want, jnp.float32, scale=scale)


@pytest.mark.parametrize("mesh_name", ["1d", "2d"])
def mesh_test_inside_shard_map(mesh_name, backend):
    mesh = _mesh(mesh_name)
    rows = P(mesh.axis_names)  # every device holds whole rows
    x, y, xs, ys = _inputs(mesh, rows)

    def block(a, b):
        return (
            jax_camp.copy(a, backend=backend),
            jax_camp.vector_add(a, b, backend=backend),
            jax_camp.reduce_sum(a, backend=backend),
            jax_camp.softmax(a, backend=backend),
        )

    specs = {"mesh": mesh, "in_specs": (rows, rows), "out_specs": (rows,) * 4}
    mapped = jax.jit(jax.shard_map(block, **specs))
    for got, want in zip(mapped(xs, ys), block(x, y)):
        assert_close(got, want, jnp.float32)
    if backend != "xla":
        assert SOFTMAX.ffi_target in mapped.lower(xs, ys).compile().as_text()


@pytest.mark.parametrize("op", GRADS)
def mesh_test_gradients_inside_shard_map(op, backend):
    """shard_map's type check (check_vma) passes: a kernel's result varies over the manual axes
    as its operands do. The middle dim, which no op reduces, is split over the devices."""
    mesh = _mesh("2d")
    middle = P(None, mesh.axis_names)
    x, y, xs, ys = _inputs(mesh, middle)
    loss = jax.shard_map(lambda a, b: jax.lax.psum(GRADS[op](a, b, backend), mesh.axis_names),
                      mesh=mesh, in_specs=(middle, middle), out_specs=P())
    grads = jax.jit(jax.grad(loss, argnums=(0, 1)))(xs, ys)
    for got, want in zip(grads, jax.grad(GRADS[op], argnums=(0, 1))(x, y, backend)):
        assert_close(got, want, jnp.float32)


def mesh_test_operands_that_do_not_vary_inside_shard_map(backend):
    """An operand the same on every device (in_specs P()) beside one that varies, as JAX's own
    ops take them: the result varies, and the invariant operand's gradient is summed over the
    devices."""
    mesh = _mesh("1d")
    _, _, xs, _ = _inputs(mesh, P("d"))
    w = random_normal(SHAPE[1:], jnp.float32)

    def losses(add, softmax):
        def per_device(a, v):
            return jax.lax.psum(((add(v, a) ** 2).sum(), (add(a, v) * a).sum(),
                                 (softmax(jnp.broadcast_to(v, a.shape), a > 0) * a).sum()), "d")
        return jax.shard_map(per_device, mesh=mesh, in_specs=(P("d"), P()), out_specs=P())

    ours = losses(lambda a, b: jax_camp.vector_add(a, b, backend=backend),
                  lambda v, m: jax_camp.softmax(v, where=m, backend=backend))
    theirs = losses(jnp.add, lambda v, m: jax.nn.softmax(v, where=m))
    for i in range(3):
        got = jax.jit(jax.grad(lambda v: ours(xs, v)[i]))(w)
        assert_close(got, jax.jit(jax.grad(lambda v: theirs(xs, v)[i]))(w), jnp.float32)


def mesh_test_vmap_over_sharded_rows(backend):
    mesh = _mesh("2d")
    x, _, xs, _ = _inputs(mesh, P("a", None, "b"))
    f = jax.jit(jax.vmap(lambda v: jax_camp.softmax(v, backend=backend), in_axes=1, out_axes=1))
    out = f(xs)
    assert_close(out, jax_camp.softmax(x, backend=backend), jnp.float32)
    assert out.sharding.is_equivalent_to(xs.sharding, out.ndim)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def mesh_test_sharded_reduced_dim_in_low_precision(dtype, backend):
    mesh = _mesh("1d")
    x = random_normal((4, 256), dtype, scale=3.0)
    xs = jax.device_put(x, NamedSharding(mesh, P(None, "d")))
    softmax = jax.jit(lambda v: jax_camp.softmax(v, backend=backend))
    assert_close(softmax(xs), jax_camp.softmax(x, backend=backend), dtype)
    # Each device's partial sum is rounded to dtype once before they are added.
    reduce_sum = jax.jit(lambda v: jax_camp.reduce_sum(v, backend=backend))
    assert_close(reduce_sum(xs), jax_camp.reduce_sum(x, backend=backend), dtype, scale=3 * sum_scale(256))


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def mesh_test_sharded_softmax_with_masked_blocks(op, backend):
    """Rows whose blocks on some devices are all -inf (a causal mask), and a
    row of -inf everywhere: as unsharded, 0 (-inf for log_softmax) and NaN."""
    mesh = _mesh("1d")
    x = np.array(random_normal((4, 32), jnp.float32))
    x[0, 4:] = -np.inf
    x[1, :] = -np.inf
    x[2, :20] = -np.inf
    xs = jax.device_put(jnp.asarray(x), NamedSharding(mesh, P(None, "d")))
    got = np.asarray(jax.jit(lambda v: getattr(jax_camp, op)(v, backend=backend))(xs))
    want = np.asarray(getattr(jax.nn, op)(jnp.asarray(x)))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def mesh_test_sharded_where_with_masked_blocks(op, backend):
    """where= masking out whole blocks of some rows' devices, and a row everywhere: as
    unsharded, 0 (-inf for log_softmax) there, never NaN."""
    mesh = _mesh("1d")
    x = random_normal((4, 32), jnp.float32)
    keep = np.ones((4, 32), bool)
    keep[0, 4:] = keep[1, :] = keep[2, :20] = False
    xs = jax.device_put(x, NamedSharding(mesh, P(None, "d")))
    got = jax.jit(lambda v: getattr(jax_camp, op)(v, where=keep, backend=backend))(xs)
    assert_close(got, getattr(jax.nn, op)(x, where=keep), jnp.float32)


def mesh_test_uneven_split_of_reduced_dim(backend):
    """A reduced dim that does not divide among the devices (XLA would pad it)."""
    mesh = _mesh("1d")
    x = random_normal((4, 32), jnp.float32)
    xs = jax.device_put(x, NamedSharding(mesh, P(None, "d")))
    for f, ref in ((jax_camp.softmax, jax.nn.softmax), (jax_camp.reduce_sum, lambda v: v.sum(-1))):
        got = jax.jit(lambda v: f(v[:, :29], backend=backend))(xs)
        assert_close(got, ref(x[:, :29]), jnp.float32)


@contextlib.contextmanager
def _partitioner(shardy: bool):
    """Shardy (JAX's default) or GSPMD, the older partitioner JAX still offers."""
    before = jax.config.jax_use_shardy_partitioner
    jax.config.update("jax_use_shardy_partitioner", shardy)
    try:
        yield
    finally:
        jax.config.update("jax_use_shardy_partitioner", before)


@pytest.mark.parametrize("shardy", [True, False])
@pytest.mark.parametrize("set_mesh", [False, True])
def mesh_test_explicit_mesh_axes(set_mesh, shardy, backend):
    """jax.make_mesh's default axis type, where shardings are part of the types: each result is
    typed, and placed, as JAX's own function's is, gradients too; with the mesh given to
    jax.set_mesh as well, as JAX's sharding guide does. Under GSPMD too, whose propagation may
    ask a kernel's result sharding before its operand has one (that aborted inside XLA)."""
    mesh = _mesh("2d", AxisType.Explicit)
    spec = P("a", None, "b")
    x, y, xs, ys = _inputs(mesh, spec)
    with _partitioner(shardy), jax.set_mesh(mesh) if set_mesh else contextlib.nullcontext():
        for op, (reduced, f) in OPS.items():
            types = []

            def traced(a, b):
                result = f(a, b, backend)
                types.append(jax.typeof(result))
                return result

            out = jax.jit(traced)(xs, ys)
            assert_close(out, f(x, y, backend), jnp.float32)
            expected = _expected_spec(spec, reduced, keeps_reduced_dim="softmax" in op)
            assert out.sharding.is_equivalent_to(NamedSharding(mesh, expected), out.ndim), (op, out.sharding)
            assert types[0].sharding.spec == expected, (op, types[0])
        for op, loss in GRADS.items():
            grad = jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)
            for got, want in zip(grad(xs, ys, backend), grad(x, y, backend)):
                assert_close(got, want, jnp.float32)
                assert got.sharding.is_equivalent_to(xs.sharding, got.ndim), (op, got.sharding)


def mesh_test_sharded_programs_do_not_export(backend):
    """What README and docs/sharding.md say of jax.export over a mesh: the kernels' partitioning
    is Python callbacks, which jax.export refuses, and custom_partitioning has no symbolic
    shapes. Should a jax release lift either, this fails, and the docs change."""
    if backend == "xla":
        pytest.skip("the xla backend is plain JAX, which exports sharded")
    mesh = _mesh("1d")
    sharding = NamedSharding(mesh, P("d"))
    f = jax.jit(lambda v: jax_camp.softmax(v, backend=backend), in_shardings=sharding,
                out_shardings=sharding)
    for shape, error, message in (("16, 24", NotImplementedError, "host_callbacks"),
                                  ("8*b, c", ValueError, "static shape")):
        arg = jax.ShapeDtypeStruct(export.symbolic_shape(shape), jnp.float32, sharding=sharding)
        with pytest.raises(error, match=message):
            export.export(f, disabled_checks=jax_camp.export_checks())(arg)


def mesh_test_shard_map_programs_export(backend):
    """Inside shard_map the kernels are plain calls, so that program exports, serializes and runs
    (concrete shapes: jax fails to run a symbolic one, even of jax.nn.softmax)."""
    pytest.importorskip("flatbuffers", reason="jax.export's serialization: pip install .[export]")
    mesh = _mesh("1d")
    sharding = NamedSharding(mesh, P("d"))

    def per_device(v):
        return jax_camp.vector_add(jax_camp.softmax(v, backend=backend),
                                   jax_camp.reduce_sum(v, keepdims=True, backend=backend), backend=backend)

    f = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=P("d"), out_specs=P("d")))
    x = jax.device_put(random_normal((16, 24), jnp.float32), sharding)
    exported = export.export(f, disabled_checks=jax_camp.export_checks())(x)
    if backend != "xla":
        assert SOFTMAX.ffi_target in exported.mlir_module()
    loaded = export.deserialize(exported.serialize())
    assert_close(loaded.call(x), jax.nn.softmax(x) + jnp.sum(x, axis=-1, keepdims=True), jnp.float32)
