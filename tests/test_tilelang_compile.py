"""Every TileLang kernel lowers and compiles for sm_90, without a GPU.

Runs in CI (a CPU machine with the tilelang extra installed); skips where
TileLang is not installed. With nvcc present (TileLang looks in CUDA_HOME,
then /usr/local/cuda) each kernel goes through the same ``tilelang.compile``
the bridge uses, down to a cubin; without it, through code generation to CUDA
source. Either way the CUDA source is checked: the copy and vector_add
kernels must move their full tiles with 128-bit vector loads and stores, and
the row kernels, on 16-byte aligned rows, load their operands 128 bits at a time.
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

from tvm import tirx  # noqa: E402
from tvm.target import Target  # noqa: E402

from helpers import progress  # noqa: E402
from jax_camp.ops._spec import SUPPORTED_DTYPES  # noqa: E402
from jax_camp.tilelang_kernels import bridge  # noqa: E402

SM90 = {"kind": "cuda", "arch": "sm_90"}
DTYPES = tuple(dtype.name for dtype in SUPPORTED_DTYPES)
# (op, aligned) pairs the bridge can ask for: the row kernels come in a
# 16-byte-aligned-rows variant and a general one.
VARIANTS = [
    (op, aligned)
    for op, kernel in bridge.OPS.items()
    for aligned in ((False, True) if kernel.spec.along_rows else (False,))
]
CASES = [(op, dtype, aligned) for op, aligned in VARIANTS for dtype in DTYPES]
ROW_CASES = [(op, dtype) for op, dtype, aligned in CASES if aligned]
# A 128-bit access in TileLang's CUDA is a global buffer offset cast to one of
# the 16-byte vector types: read on the right of "=", written on its left.
_VEC128 = r"\*\((?:uint4|int4|float4|ulonglong2|longlong2|double2)\*\)\({buf} \+"
LOAD_128 = "= " + _VEC128
STORE_128 = r"^\s*" + _VEC128 + r"[^;]*\) = "
PROGRESS_S = 15


def _has_nvcc() -> bool:
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    return shutil.which("nvcc") is not None or os.path.exists(os.path.join(cuda_home, "bin", "nvcc"))


def _source(program) -> str:
    if _has_nvcc():
        return bridge.compile_program(program, target=SM90).get_kernel_source()
    # Lowering reads the target from a thread-local context.
    with Target(SM90):
        return tilelang.lower(program, target=SM90).kernel_source


@pytest.fixture(scope="module")
def programs() -> dict[tuple[str, str, bool], tirx.PrimFunc]:
    # Built one at a time: TileLang's builder is not thread-safe.
    return {case: bridge.build_program(*case) for case in CASES}


@pytest.fixture(scope="module")
def sources(request, programs) -> dict[tuple[str, str, bool], concurrent.futures.Future]:
    # Lowering releases the GIL and nvcc runs in a subprocess, so the
    # compiles overlap on a machine with cores to spare. Without TileLang's
    # disk cache they take about a minute on two cores: a line every
    # PROGRESS_S seconds says how far they are.
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


@pytest.mark.parametrize("op, dtype, aligned", CASES)
def test_compiles_for_sm90(sources, op: str, dtype: str, aligned: bool) -> None:
    source = sources[(op, dtype, aligned)].result()
    assert re.search(rf"__global__ void .*\b{op}_kernel\(", source), source[:2000]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op, inputs, output", [("copy", "X", "Y"), ("vector_add", "XY", "Z")])
def test_elementwise_kernels_use_128_bit_vectors(
    sources, op: str, inputs: str, output: str, dtype: str
) -> None:
    source = sources[(op, dtype, False)].result()
    for buf in inputs:
        assert re.search(LOAD_128.format(buf=buf), source), (
            f"no 128-bit load from {buf} in the {op} {dtype} kernel:\n{source}"
        )
    assert re.search(STORE_128.format(buf=output), source, re.M), (
        f"no 128-bit store to {output} in the {op} {dtype} kernel:\n{source}"
    )


@pytest.mark.parametrize("op, dtype", ROW_CASES)
def test_aligned_row_kernels_load_128_bit_vectors(programs, sources, op: str, dtype: str) -> None:
    """On 16-byte aligned rows each operand of x's dtype comes in 128 bits a load; a
    where= mask, a byte an element, comes in narrower vectors and is not checked."""
    program, source = programs[(op, dtype, True)], sources[(op, dtype, True)].result()
    spec = bridge.OPS[op].spec
    for param in program.params[: spec.arity - spec.mask_operand]:
        buf = program.buffer_map[param].name
        assert re.search(LOAD_128.format(buf=buf), source), (
            f"no 128-bit load from {buf} in the aligned {op} {dtype} kernel:\n{source}"
        )


def test_unaligned_rows_compile_to_a_different_kernel(sources) -> None:
    """The aligned variant really is one: T.assume changes the generated code."""
    general = sources[("reduce_sum", "float16", False)].result()
    aligned = sources[("reduce_sum", "float16", True)].result()
    assert general != aligned
    assert re.search(LOAD_128.format(buf="X"), aligned)
    assert not re.search(LOAD_128.format(buf="X"), general)
