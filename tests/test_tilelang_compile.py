"""Every TileLang kernel lowers and compiles for sm_90, without a GPU.

Runs in CI (a CPU machine with the tilelang extra installed); skips where
TileLang is not installed. With nvcc present (TileLang looks in CUDA_HOME,
then /usr/local/cuda) each kernel goes through the same ``tilelang.compile``
the bridge uses, down to a cubin; without it, through code generation to CUDA
source. Every configuration the bridge can pick is compiled: each row kernel
by every tile of ``_rows.all_tiles`` (tests/test_tilelang_tiles.py checks which
it picks when). Either way the CUDA source is checked: each kernel asks ptxas
for its tile's blocks an SM in its launch bounds; the copy and vector_add
kernels must move their full tiles with 128-bit vector loads and stores, and
the row kernels, on 16-byte aligned rows (every resident tile), load their
operands 128 bits at a time; softmax's and log_softmax's forwards take one
fast exponential a value a pass; the masked ones load the mask a vector at a
time and compare no mask byte before the row's maximum. The bridge hands the
masked kernels JAX's bool mask without converting it.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import shutil
import time

import pytest

tilelang = pytest.importorskip("tilelang")
pytest.importorskip("jax_tvm_ffi")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import tvm  # noqa: E402
from tvm import tirx  # noqa: E402
from tvm.target import Target  # noqa: E402

from helpers import progress  # noqa: E402
from jax_camp.ops._spec import SUPPORTED_DTYPES  # noqa: E402
from jax_camp.tilelang_kernels import bridge  # noqa: E402
from jax_camp.tilelang_kernels._rows import (  # noqa: E402
    CLUSTER_KERNELS, MAX_THREADS, RowTile, all_tiles, prefetch_stages, row_tile,
    vector_elements,
)
from jax_camp.tilelang_kernels.softmax import reads_again_for_pass_2  # noqa: E402

SM90 = {"kind": "cuda", "arch": "sm_90"}
DTYPES = tuple(dtype.name for dtype in SUPPORTED_DTYPES)
ROW_OPS = tuple(name for name, kernel in bridge.OPS.items() if kernel.spec.along_rows)
# (op, dtype, tile) triples the bridge can ask for: a row kernel by each of its tiles, a flat
# kernel by none.
CASES = [
    (op, dtype, tile)
    for op in bridge.OPS
    for dtype in DTYPES
    for tile in (all_tiles(dtype, op) if op in ROW_OPS else (None,))
]
ROW_CASES = [case for case in CASES if case[2] is not None and case[2].aligned]
# A 128-bit access in TileLang's CUDA is a global buffer offset cast to one of
# the 16-byte vector types: read on the right of "=", written on its left.
_VEC128 = r"\*\((?:uint4|int4|float4|ulonglong2|longlong2|double2)\*\)\({buf} \+"
LOAD_128 = "= " + _VEC128
STORE_128 = r"^\s*" + _VEC128 + r"[^;]*\) = "
# A tile taking row groups in turn copies its operands into shared memory with cp.async,
# 16 bytes (x's vector) or 4 or 8 (a mask's bytes beside it) a copy.
ASYNC_LOAD = r"cp_async_gs(?:_conditional)?<{size}>\([^;]*&\((?:\(\(u?char\*\){buf}\)|{buf})\["
PROGRESS_S = 15


def _has_nvcc() -> bool:
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    return shutil.which("nvcc") is not None or os.path.exists(os.path.join(cuda_home, "bin", "nvcc"))


def _source(program) -> str:
    if _has_nvcc():
        return bridge.compile_program(program, target=SM90).get_kernel_source()
    # Lowering reads the target and the pass configuration from thread-local contexts.
    with Target(SM90), tvm.transform.PassContext(config=bridge.PASS_CONFIGS):
        return tilelang.lower(program, target=SM90).kernel_source


@pytest.fixture(scope="module")
def programs() -> dict[tuple[str, str, RowTile | None], tirx.PrimFunc]:
    # Built one at a time: TileLang's builder is not thread-safe.
    return {case: bridge.build_program(*case) for case in CASES}


@pytest.fixture(scope="module")
def sources(request, programs) -> dict[tuple[str, str, RowTile | None], concurrent.futures.Future]:
    # Lowering releases the GIL and nvcc runs in a subprocess, so the
    # compiles overlap on a machine with cores to spare. Without TileLang's
    # disk cache they take minutes on two cores: a line every PROGRESS_S
    # seconds says how far they are.
    start = time.monotonic()
    progress(request.config, f"test_tilelang_compile: compiling {len(CASES)} TileLang kernels for sm_90")
    workers = min(len(CASES), os.cpu_count() or 1)
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        futures = {case: pool.submit(_source, program) for case, program in programs.items()}
        pending = set(futures.values())
        while pending:
            _, pending = concurrent.futures.wait(pending, timeout=PROGRESS_S)
            progress(request.config, f"test_tilelang_compile: {len(futures) - len(pending)}/"
                                     f"{len(futures)} compiled ({time.monotonic() - start:.0f} s)")
    return futures


def _x_loads(source: str, buf: str = "X") -> int:
    """The places ``source`` reads ``buf`` 128 bits at a time, straight or by cp.async."""
    return (len(re.findall(LOAD_128.format(buf=buf), source))
            + len(re.findall(ASYNC_LOAD.format(size=16, buf=buf), source)))


def _mask_loads(source: str, dtype: str) -> int:
    """The places ``source`` reads a vector's worth of mask bytes, straight or by cp.async; or,
    by cp.async, 16 of them, as a kernel compiled for its rows' width (``RowTile.exact``) may."""
    width = vector_elements(dtype)
    return (len(re.findall(LOAD_MASK.format(types=MASK_VECTOR[width]), source))
            + len(re.findall(ASYNC_LOAD.format(size=width, buf="Mask"), source))
            + len(re.findall(ASYNC_LOAD.format(size=16, buf="Mask"), source)))


def _bodies(op: str, dtype: str, tile: RowTile) -> int:
    """How many times a row group's code is in the kernel: a software pipeline's epilogue
    writes it out again for each group it keeps in flight."""
    return 1 if tile.row_groups == 1 else 1 + prefetch_stages(tile, dtype, op)


def _case_id(case) -> str:
    op, dtype, tile = case
    return f"{op}-{dtype}" + (f"-{tile.name}" if tile else "")


@pytest.mark.parametrize("op, dtype, tile", CASES, ids=map(_case_id, CASES))
def test_compiles_for_sm90(sources, op: str, dtype: str, tile: RowTile | None) -> None:
    """Each kernel is named for its op, and asks ptxas for its tile's blocks an SM."""
    source = sources[(op, dtype, tile)].result()
    assert re.search(rf"__global__ void .*\b{op}_kernel\(", source), source[:2000]
    bounds = re.search(r"__launch_bounds__\(\d+(?:, (\d+))?\)", source)
    assert int(bounds[1] or 1) == (tile.blocks_per_sm if tile else 1), bounds[0]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op, inputs, output", [("copy", "X", "Y"), ("vector_add", "XY", "Z")])
def test_elementwise_kernels_use_128_bit_vectors(
    sources, op: str, inputs: str, output: str, dtype: str
) -> None:
    source = sources[(op, dtype, None)].result()
    for buf in inputs:
        assert re.search(LOAD_128.format(buf=buf), source), (
            f"no 128-bit load from {buf} in the {op} {dtype} kernel:\n{source}"
        )
    assert re.search(STORE_128.format(buf=output), source, re.M), (
        f"no 128-bit store to {output} in the {op} {dtype} kernel:\n{source}"
    )


@pytest.mark.parametrize("op, dtype, tile", ROW_CASES, ids=map(_case_id, ROW_CASES))
def test_aligned_row_kernels_load_128_bit_vectors(
    programs, sources, op: str, dtype: str, tile: RowTile
) -> None:
    """On 16-byte aligned rows each operand of x's dtype comes in 128 bits a load, and a
    result of rows goes out 128 bits a store. A where= mask, a byte an element, comes in
    narrower vectors (the next test), and reduce_sum's result, a value a row, is not checked."""
    case = (op, dtype, tile)
    program, source = programs[case], sources[case].result()
    spec = bridge.OPS[op].spec
    for param in program.params[: spec.arity - spec.mask_operand]:
        buf = program.buffer_map[param].name
        assert _x_loads(source, buf), (
            f"no 128-bit load from {buf} in the aligned {op} {dtype} {tile.name} kernel:\n{source}"
        )
    if not spec.drops_last_dim:
        buf = program.buffer_map[program.params[spec.arity]].name
        assert re.search(STORE_128.format(buf=buf), source, re.M), (
            f"no 128-bit store to {buf} in the aligned {op} {dtype} {tile.name} kernel:\n{source}"
        )


MASKED_OPS = tuple(name for name, kernel in bridge.OPS.items() if kernel.spec.mask_operand)
# The row kernels of two operands of x's dtype, y and g: softmax's and log_softmax's derivatives.
DERIVATIVE_OPS = tuple(name for name, kernel in bridge.OPS.items()
                       if kernel.spec.along_rows and kernel.spec.arity == 2
                       and not kernel.spec.mask_operand)
MASKED_ROW_CASES = [case for case in ROW_CASES if case[0] in MASKED_OPS]
# A load of 4 or 8 bytes of the mask, a byte for each element of one of x's 16-byte vectors;
# TileLang reads the bool buffer through a uint8 view, a pointer cast it may write or not.
MASK_VECTOR = {4: r"u?int|u?char4", 8: r"u?int2|u?longlong|ulong|uchar8"}
LOAD_MASK = r"= \*\((?:{types})\*\)\((?:\(\(u?char\*\)Mask\)|Mask) \+"


@pytest.mark.parametrize("op, dtype, tile", MASKED_ROW_CASES, ids=map(_case_id, MASKED_ROW_CASES))
def test_aligned_masked_kernels_load_the_mask_in_vectors(sources, op: str, dtype: str, tile: RowTile) -> None:
    """The mask comes in with x's vectors: 4 bytes a load beside a float32 vector, 8 beside a
    16-bit one (16 a cp.async where the kernel knows its rows' width), never a byte at a
    time."""
    source = sources[(op, dtype, tile)].result()
    width = vector_elements(dtype)
    assert _mask_loads(source, dtype), (
        f"no {width}-byte load from Mask in the aligned {op} {dtype} {tile.name} kernel:\n{source}"
    )


MASKED_CASES = [case for case in CASES if case[0] in MASKED_OPS]
# A compare of a mask byte in TileLang's CUDA: the byte read through an int cast, or beside a
# comparison operator.
MASK_COMPARE = r"\(\(int\)keep\w*\[|\bkeep\w*\[[^\]]*\]\)*\s*(?:!=|==|<=|>=|<|>)"


@pytest.mark.parametrize("op, dtype, tile", MASKED_CASES, ids=map(_case_id, MASKED_CASES))
def test_masked_kernels_drop_values_without_comparing_mask_bytes(
    sources, op: str, dtype: str, tile: RowTile
) -> None:
    """Pass 1 drops a masked-out value by min(x, +-inf), not by a select on its mask byte:
    each compare takes a predicate register, and past a thread's seven ptxas waits on the
    mask's loads before it issues x's (softmax.py). So nothing before the row's first max
    reduction compares a mask byte; pass 2, which stores the masked value, does."""
    source = sources[(op, dtype, tile)].result()
    first_max = source.index("tl::MaxOp")
    assert not re.search(MASK_COMPARE, source[:first_max]), source
    assert re.search(MASK_COMPARE, source[first_max:]), source


# The __expf calls in each forward's CUDA, for a resident tile and a streamed one: a resident
# row takes its exponentials in pass 1 and keeps them for pass 2; a streamed one takes them in
# pass 1, in merging its lanes' sums, and, for softmax, in pass 2 when it reads the row again.
EXP_CALLS = {"softmax": (1, 3), "softmax_masked": (1, 3), "log_softmax": (1, 2), "log_softmax_masked": (1, 2)}
FORWARD_CASES = [case for case in CASES if case[0] in EXP_CALLS]


@pytest.mark.parametrize("op, dtype, tile", FORWARD_CASES, ids=map(_case_id, FORWARD_CASES))
def test_forwards_take_one_fast_exponential_a_value_a_pass(sources, op: str, dtype: str, tile: RowTile) -> None:
    """Every exponential is __expf (a multiply and ex2.approx), none the accurate expf or exp2f,
    several instructions longer, and a pass computes each value's once. A row held over a
    cluster takes two more a row, in pooling the blocks' pairs (share_over_cluster)."""
    source = sources[(op, dtype, tile)].result()
    accurate = re.findall(r"\b(?:expf|exp2f|exp|exp2)\(", source)
    assert not accurate, f"{accurate} in the {op} {dtype} {tile.name} kernel:\n{source}"
    resident, streamed = EXP_CALLS[op]
    pooling = 2 if tile.cluster > 1 else 0
    calls = (resident + pooling if tile.resident else streamed) * _bodies(op, dtype, tile)
    assert len(re.findall(r"__expf\(", source)) == calls, source


LOG_SOFTMAX_DERIVATIVE_CASES = [
    case for case in CASES if case[0] in ("log_softmax_backward", "log_softmax_tangent")]


@pytest.mark.parametrize("op, dtype, tile", LOG_SOFTMAX_DERIVATIVE_CASES,
                         ids=map(_case_id, LOG_SOFTMAX_DERIVATIVE_CASES))
def test_log_softmax_derivatives_take_the_accurate_exponential(
    sources, op: str, dtype: str, tile: RowTile
) -> None:
    """exp(y) of a log-probability is expf, never the forwards' __expf: y is about -15 in a row
    of millions, where __expf's rounding of y * log2(e) would cost about 8e-7 of relative error
    (docs/accuracy.md)."""
    source = sources[(op, dtype, tile)].result()
    assert re.findall(r"\bexpf\(", source), source
    assert not re.findall(r"__expf\(", source), source


RESIDENT_CASES = [case for case in FORWARD_CASES if case[0].startswith("log_") and case[2].resident]


@pytest.mark.parametrize("op, dtype, tile", RESIDENT_CASES, ids=map(_case_id, RESIDENT_CASES))
def test_log_softmax_reads_a_crowded_resident_row_again(
    sources, op: str, dtype: str, tile: RowTile
) -> None:
    """log_softmax's pass 2 needs x: a resident tile holds it where a thread has at most
    MAX_VALUES_HELD_FOR_PASS_2 values of the row, or takes row groups, and reads the row again
    elsewhere, so that x does not stay in registers beside pass 1's exponentials. softmax's
    pass 2 needs only the exponentials, and reads the row once."""
    twin = op.replace("log_", "")
    loads = {name: _x_loads(sources[(name, dtype, tile)].result()) for name in (op, twin)}
    reads = 2 if reads_again_for_pass_2(tile) else 1
    assert loads[twin] > 0 and loads[op] == loads[twin] * reads, (loads, tile)


MASKED_RESIDENT_CASES = [case for case in MASKED_ROW_CASES if case[2].resident]


@pytest.mark.parametrize("op, dtype, tile", MASKED_RESIDENT_CASES,
                         ids=map(_case_id, MASKED_RESIDENT_CASES))
def test_a_crowded_masked_row_reads_its_mask_again(
    sources, op: str, dtype: str, tile: RowTile
) -> None:
    """Pass 2 of a masked kernel needs each element's mask byte: a resident tile holds the
    bytes through pass 1 where a thread has at most MAX_VALUES_HELD_FOR_PASS_2 values of the
    row, or takes row groups, and reads them again elsewhere (with x, for log_softmax), so
    that they take no registers beside pass 1's exponentials."""
    source = sources[(op, dtype, tile)].result()
    x_loads, mask_loads = _x_loads(source), _mask_loads(source, dtype)
    reads_again = reads_again_for_pass_2(tile)
    x_reads = 2 if reads_again and op.startswith("log_") else 1
    mask_reads = 2 if reads_again else 1
    assert x_loads > 0 and mask_loads * x_reads == x_loads * mask_reads, (x_loads, mask_loads, tile)


GROUPED_CASES = [case for case in ROW_CASES if case[2].row_groups > 1]


@pytest.mark.parametrize("op, dtype, tile", GROUPED_CASES, ids=map(_case_id, GROUPED_CASES))
def test_row_groups_come_in_through_shared_memory_asynchronously(
    sources, op: str, dtype: str, tile: RowTile
) -> None:
    """A tile taking row groups in turn copies each group's x (and mask; a derivative's y and
    g) into shared memory with cp.async, one group ahead of the one it works on, and nothing of
    it straight from memory: pass 2 reads nothing again. A tile where not one group of them fits
    shared memory (softmax's float32 backward over a cluster) loads them straight instead."""
    source = sources[(op, dtype, tile)].result()
    operands = ("Yv", "G") if op in DERIVATIVE_OPS else ("X",)
    staged = prefetch_stages(tile, dtype, op) > 0
    for buf in operands:
        assert bool(re.search(ASYNC_LOAD.format(size=16, buf=buf), source)) == staged, source
        assert bool(re.search(LOAD_128.format(buf=buf), source)) != staged, source
    if op in MASKED_OPS:
        widths = (vector_elements(dtype), 16) if tile.exact else (vector_elements(dtype),)
        assert any(re.search(ASYNC_LOAD.format(size=width, buf="Mask"), source)
                   for width in widths), source


def test_unaligned_rows_compile_to_a_different_kernel(sources) -> None:
    """The aligned variant really is one: T.assume changes the generated code."""
    general = sources[("reduce_sum", "float16", row_tile(40_001, "float16", "reduce_sum"))].result()
    aligned = sources[("reduce_sum", "float16", row_tile(40_000, "float16", "reduce_sum"))].result()
    assert general != aligned
    assert re.search(LOAD_128.format(buf="X"), aligned)
    assert not re.search(LOAD_128.format(buf="X"), general)


@pytest.mark.parametrize("op", sorted(CLUSTER_KERNELS))
def test_a_16_bit_cluster_part_takes_half_the_threads(sources, op: str) -> None:
    """A block holding part of a row over a cluster is alone on its SM: 1024 threads of 32
    values in float32, 512 of 64 in the 16-bit types, where fewer threads take each row's
    reductions and the cluster's exchange (docs/tilelang_design_long_rows.md)."""
    for dtype in CLUSTER_KERNELS[op]:
        for tile in (t for t in all_tiles(dtype, op) if t.cluster > 1):
            threads = MAX_THREADS if dtype == "float32" else MAX_THREADS // 2
            assert (tile.threads, tile.values_per_thread) == (threads, 32768 // threads), tile
            source = sources[(op, dtype, tile)].result()
            assert f"__launch_bounds__({threads}, 1)" in source, tile


def test_the_driver_counts_the_clusters_a_gpu_keeps_resident() -> None:
    """bridge.resident_clusters, which sizes the cluster tiles' row groups: on a GPU with
    thread-block clusters, some of each size, fewer of a larger size and on no more SMs
    together; None without one (no GPU here, or one before sm_90)."""
    counts = bridge.resident_clusters()
    target = bridge.compile_target()
    if target is None or int(target["arch"].removeprefix("sm_").rstrip("a")) < 90:
        assert counts is None
        return
    assert sorted(counts) == [2, 4, 8], counts
    assert counts[2] >= counts[4] >= counts[8] > 0, counts
    assert 2 * counts[2] >= 4 * counts[4] >= 8 * counts[8], counts


@pytest.mark.skipif(not _has_nvcc(), reason="the bridge registers a kernel by compiling it, with nvcc")
@pytest.mark.parametrize("op", MASKED_OPS)
def test_the_bridge_hands_a_mask_over_unconverted(monkeypatch, op: str) -> None:
    """A where= mask is XLA's bool, one byte an element, and the masked kernels read those
    bytes as they are: a conversion before the call would be a pass over the mask of its own."""
    if bridge.compile_target() is None:
        # No GPU: the kernel the bridge registers (and keeps for the process) is for sm_90.
        # On a GPU it is the one that GPU's later tests run, compiled for it.
        monkeypatch.setattr(bridge, "compile_target", lambda: SM90)
        monkeypatch.setattr(bridge, "resident_clusters", lambda: None)
    x = jnp.ones((4, 64), jnp.float32)
    call = jax.jit(lambda v, mask: bridge.kernel_call(bridge.OPS[op].spec, v, mask))
    text = call.lower(x, x > 0).as_text()
    assert f"custom_call @jax_camp_tilelang_{op}_float32_" in text
    assert "stablehlo.convert" not in text
