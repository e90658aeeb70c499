"""What nvcc makes of the CUDA kernels, checked without a GPU.

Runs wherever nvcc is (CI has it); skips elsewhere. Compiles each csrc/<op>/<op>.cu
for sm_90 and checks properties the kernels' speed rests on, which a correct
result does not show:
- no register spills, in any instantiation (nvcc -Xptxas -v): a spilled row
  chunk goes through local memory, as happened twice while the row kernels
  were tuned;
- 128-bit global accesses wherever the data comes in 16-byte packs (the PTX):
  the bfloat16 vector_add once read its packs 16 bits at a time and ran at
  0.89x XLA, and nvcc once split some of softmax's 16-byte stores in four;
- reduce_sum's float32 kernels built for one block an SM (kMinBlocks), without
  which ptxas issued a chunk's loads in rounds;
- softmax's and log_softmax's forward kernels of rows held by a block issuing
  their chunk's loads before they take its max (the SASS, where there is a
  cuobjdump): log_softmax's float32 kernel once issued 6 of 16 first, then
  waited on memory twice a row;
- their forward kernels with where='s mask waiting on memory at most twice a
  chunk before the row's reduction (the SASS): most once waited 10 to 21 times.
It also checks one property their accuracy rests on, which only a GPU's rows of
millions would show: log_softmax's derivatives take exp(y) by PreciseExp (a
literal of its correction in their PTX).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Callable, Iterator

import pytest

import jax.ffi

from background_runs import BackgroundRuns
from helpers import NVCC, ROOT, progress

OPS = ("copy", "vector_add", "reduce_sum", "softmax", "log_softmax")
pytestmark = pytest.mark.skipif(NVCC is None, reason="needs nvcc")


def _cuobjdump() -> str | None:
    """The SASS disassembler: on the PATH, or beside nvcc as in a full toolkit."""
    beside_nvcc = Path(NVCC).parent / "cuobjdump" if NVCC else None
    if shutil.which("cuobjdump"):
        return shutil.which("cuobjdump")
    return str(beside_nvcc) if beside_nvcc and beside_nvcc.exists() else None


CUOBJDUMP = _cuobjdump()


def _nvcc(op: str) -> Callable[[Path, pytest.Config], list[str]]:
    """nvcc's command for csrc/<op>/<op>.cu for sm_90, writing into a folder: ``-cubin``
    compiles the device code only (no host object, which nothing here reads), ``-Xptxas -v``
    reports each kernel's registers and spills, and ``--keep`` leaves the PTX that ptxas was
    given, the same text ``-ptx`` writes."""
    def command(folder: Path, _: pytest.Config) -> list[str]:
        return [NVCC, "-std=c++17", "-O3", "-arch=sm_90", "--expt-relaxed-constexpr",
                f"-I{jax.ffi.include_dir()}", str(ROOT / "csrc" / op / f"{op}.cu"),
                "-cubin", "-Xptxas", "-v", "--keep", f"--keep-dir={folder}", "-o", str(folder / f"{op}.cubin")]
    return command


# Started while the other tests run (tests/background_runs.py).
RUNS = BackgroundRuns(__name__, {op: _nvcc(op) for op in OPS}) if NVCC else None


@pytest.fixture(scope="module")
def cubins(request) -> dict[str, Path]:
    """Each op's sm_90 cubin."""
    done = RUNS.wait(request.config, lambda line: progress(request.config, line))
    return {op: folder / f"{op}.cubin" for op, (folder, _, _) in done.items()}


@pytest.fixture(scope="module")
def builds(request) -> dict[str, tuple[str, str]]:
    """(ptxas -v report, PTX) of each op's .cu."""
    done = RUNS.wait(request.config, lambda line: progress(request.config, line))
    progress(request.config, "test_cuda_codegen: " + ", ".join(
        f"{op}.cu compiled in {seconds:.0f} s" for op, (_, _, seconds) in done.items()))
    return {op: (stderr, (folder / f"{op}.ptx").read_text()) for op, (folder, stderr, _) in done.items()}


def _kernels(ptx: str) -> dict[str, str]:
    """Mangled name -> PTX body of each kernel: its text up to the next kernel. Not up to the
    first closing brace in column 0: inline asm from cuda_bf16.h (__hmax2) has such braces."""
    return {m.group(1): m.group(2)
            for m in re.finditer(r"\.entry (\S+)\((.*?)(?=\.entry |\Z)", ptx, re.S)}


def _pack(name: str) -> int:
    """The kPack template argument of a kernel's mangled name (the int after its element type,
    which follows softmax's output or gradient where the kernel has one)."""
    return int(re.search(r"(?:f|6__half|13__nv_bfloat16)Li(\d+)E", name).group(1))


def _packed_kernels(builds, op: str) -> dict[str, str]:
    """The op's kernels that move 16-byte packs (kPack > 1), by name."""
    kernels = {name: body for name, body in _kernels(builds[op][1]).items()
               if "ArchitectureProbe" not in name and _pack(name) > 1}
    assert kernels, f"{op}: no packed kernels in the PTX"
    return kernels


def _global_accesses(body: str) -> tuple[list[str], list[str]]:
    """(vector, scalar) global loads and stores of a PTX body."""
    ops = re.findall(r"\b((?:ld|st)\.global(?:\.nc)?\.(?:v\d\.)?\w+)", body)
    return [o for o in ops if ".v4." in o], [o for o in ops if ".v4." not in o]


@pytest.mark.parametrize("op", OPS)
def test_no_spills(builds, op):
    report, _ = builds[op]
    functions = re.findall(r"Function properties for (\S+)\n\s*(\d+) bytes stack frame, "
                           r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    assert functions, report
    spilling = [name for name, stack, stores, loads in functions if int(stores) or int(loads)]
    assert not spilling, f"{op}: spills in {spilling}"


# PreciseExp's mark in the PTX: what float32 leaves out of log2(e) (kLog2eRest, 1.925963e-08),
# a literal of its correction that the fast Exp never takes.
PRECISE_EXP_LITERAL = "0f32A57060"


def test_log_softmax_derivatives_take_the_precise_exponential(builds):
    """log_softmax's backward and tangent take exp(y) by PreciseExp in every instantiation: y is
    about -15 in a row of millions, where Exp's rounding of y * log2(e) would cost about 8e-7 of
    relative error (docs/accuracy.md)."""
    derivatives = {name: body for name, body in _kernels(builds["log_softmax"][1]).items()
                   if "LogSoftmaxGradient" in name or "LogSoftmaxTangent" in name}
    assert derivatives
    fast = [name for name, body in derivatives.items() if PRECISE_EXP_LITERAL not in body]
    assert not fast, fast


# where='s mask, one byte a value, is read a pack at a time: 4 bytes for 4 float32 values, 8 for
# 8 16-bit ones (csrc/softmax/softmax_mask.cuh). The masked kernels' names say kMasked after
# their output (Output, then Lb1E).
MASK_PACK_LOADS = ("ld.global.nc.u32", "ld.global.nc.v2.u32")


@pytest.mark.parametrize("op", ("reduce_sum", "softmax", "log_softmax"))
def test_row_kernels_move_packs_128_bits_at_a_time(builds, op):
    for name, body in _packed_kernels(builds, op).items():
        vector, scalar = _global_accesses(body)
        masked = re.search(r"OutputE\dELb1E", name) is not None
        if masked:
            mask_loads = [o for o in vector + scalar if o in MASK_PACK_LOADS]
            assert len(set(mask_loads)) == 1, f"{name}: {mask_loads}"
            vector = [o for o in vector if o not in MASK_PACK_LOADS]
            scalar = [o for o in scalar if o not in MASK_PACK_LOADS]
        assert vector, name
        # reduce_sum's only scalar access is the one sum it writes a row.
        allowed = ["st.global.f32", "st.global.u16"] if op == "reduce_sum" else []
        assert [s for s in scalar if s not in allowed] == [], f"{name}: {scalar}"
        assert len(scalar) <= 1, f"{name}: {scalar}"


@pytest.mark.parametrize("op", ("copy", "vector_add"))
def test_elementwise_kernels_load_and_store_128_bits(builds, op):
    for name, body in _packed_kernels(builds, op).items():
        vector, _ = _global_accesses(body)
        # The scalar accesses left are the n % pack tail's.
        assert any(v.startswith("ld.") for v in vector), f"{name}: no 128-bit loads"
        assert any(v.startswith("st.") for v in vector), f"{name}: no 128-bit stores"


def test_sums_are_built_for_their_blocks_an_sm(builds):
    """reduce_sum's kMinBlocks: float32 kernels ask ptxas for one block an SM (then it issues a
    chunk's loads before summing any), 16-bit ones for two."""
    kernels = {name: body for name, body in _kernels(builds["reduce_sum"][1]).items()
               if "ReduceSumKernel" in name}
    assert kernels
    for name, body in kernels.items():
        expected = 1 if "ReduceSumKernelIf" in name else 2
        assert re.findall(r"\.minnctapersm (\d+)", body) == [str(expected)], name


def test_sums_select_once_a_16_bit_pack_and_a_compensated_add(builds):
    """reduce_sum adds a 16-bit chunk by RowChunk::Sum: every pack is added and a select keeps the
    row's, one a pack, leaving ptxas no branch to sink a load into; float32 keeps ForEach's branches.
    A streamed row's CompensatedSum::Add, one a float32 pack and one a 16-bit chunk, selects once
    more (its guard for an inf sum); a held row's PlainSum adds with no select."""
    for name, body in _packed_kernels(builds, "reduce_sum").items():
        chunk, streamed = re.search(r"Li\d+ELi(\d+)ELb([01])E", name).groups()
        chunk, compensated = int(chunk), streamed == "1"
        selects = len(re.findall(r"\bselp\.f32\b", body))
        if "ReduceSumKernelIf" in name:
            assert selects == (chunk if compensated else 0), name
        else:
            assert selects == chunk + compensated, name


def _sass_functions(cubin: Path) -> dict[str, str]:
    """Mangled name -> SASS of each kernel in a cubin."""
    sass = subprocess.run([CUOBJDUMP, "-sass", str(cubin)], capture_output=True, text=True,
                          check=True).stdout
    return {m.group(1): m.group(2)
            for m in re.finditer(r"Function : (\S+)\n(.*?)(?=Function : |\Z)", sass, re.S)}


def _instructions_before_reduction(sass: str) -> Iterator[tuple[str, str]]:
    """(opcode with its modifiers, operands) of each instruction of a kernel's SASS, its
    predicate dropped, up to the team's reduction (its first SHFL)."""
    for line in re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([^;]*);", sass):
        opcode, _, operands = line.partition(" ")
        if opcode.split(".")[0] == "SHFL":
            return
        yield opcode, operands


def _loads_after_first_max(sass: str) -> tuple[int, int]:
    """(global loads issued after the first max instruction, global loads) before the team's
    reduction: loads after the max are a second wait on memory."""
    loads = after = 0
    seen_max = False
    for opcode, _ in _instructions_before_reduction(sass):
        op = opcode.split(".")[0]
        seen_max = seen_max or op in ("FMNMX", "HMNMX2", "VHMNMX")
        if op == "LDG":
            loads += 1
            after += seen_max
    return after, loads


@pytest.mark.skipif(CUOBJDUMP is None, reason="needs cuobjdump")
@pytest.mark.parametrize("op", ("softmax", "log_softmax"))
def test_held_rows_load_their_chunk_before_its_max(cubins, op):
    """The forward kernels without a mask, of rows held by a block: at most 2 of a chunk's loads
    come after the first max (ptxas leaves one or two late in some of them)."""
    kernels = {name: sass for name, sass in _sass_functions(cubins[op]).items()
               if re.search(r"SoftmaxForwardKernelILNS0_6OutputE\dELb0E.*RowLayoutE0E", name)}
    assert kernels
    late = {name: counts for name, sass in kernels.items()
            if (counts := _loads_after_first_max(sass))[0] > 2 or counts[1] == 0}
    assert not late, f"{op}: (loads after the first max, loads) {late}"


def _registers(operands: str) -> set[int]:
    """The general registers an instruction's operands name (R12 -> 12)."""
    return {int(r) for r in re.findall(r"\bR(\d+)\b", operands)}


def _waits_on_memory(sass: str) -> tuple[int, int]:
    """(waits on memory, global loads) before the team's reduction. A wait is an instruction
    that reads or overwrites a register written by a load issued since the last wait, counted
    where more loads follow it: a chunk whose loads all go out first waits 0 times, and each
    wait is a trip to memory the thread makes before it issues the rest."""
    waits = loads = 0
    pending: set[int] = set()  # registers written by the loads since the last wait
    waited = False
    for op, operands in _instructions_before_reduction(sass):
        if op.startswith("LDG"):
            destination, _, address = operands.partition(",")
            if _registers(address) & pending:
                pending.clear()
                waited = True
            waits += waited
            waited = False
            first = int(re.search(r"R(\d+)", destination).group(1))
            width = 4 if ".128" in op else 2 if ".64" in op else 1
            pending.update(range(first, first + width))
            loads += 1
        elif pending and _registers(operands) & pending:
            pending.clear()
            waited = True
    return waits, loads


@pytest.mark.skipif(CUOBJDUMP is None, reason="needs cuobjdump")
@pytest.mark.parametrize("op", ("softmax", "log_softmax"))
def test_masked_rows_wait_on_memory_at_most_twice(cubins, op):
    """The forward kernels with where='s mask, of rows held by a block or a cluster and of
    packed rows streamed: a chunk's loads, x's and the mask's, wait on memory at most twice
    before the team's reduction. Each pack's mask once made bits by compares, whose predicates
    ptxas ran short of, and most of these kernels waited on memory 10 to 21 times a chunk."""
    kernels = {name: sass for name, sass in _sass_functions(cubins[op]).items()
               if re.search(r"SoftmaxForwardKernelILNS0_6OutputE\dELb1E", name)
               and _pack(name) > 1}
    assert kernels
    waiting = {name: counts for name, sass in kernels.items()
               if (counts := _waits_on_memory(sass))[0] > 2 or counts[1] == 0}
    assert not waiting, f"{op}: (waits on memory, loads) {waiting}"
