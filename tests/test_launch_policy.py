"""The row kernels' launch plans (csrc/common/row_plan.h), checked without a GPU.

The plans are host code, which the compiled module exposes (`_kernels.row_plan`):
the tests hold them to what the softmax and reduce_sum pages and tests/test_softmax.py
say each row length gets: warp lanes, a block, a cluster of blocks (softmax only, Hopper
only), or one block streaming the row, and which plans prefetch their next row. A small
driver built with nvcc checks what only CUDA code can show: which kernels are compiled
for their lanes, and the blocks they then assume; the launcher refusing a plan it has no
kernel for; the bytes the kernels prefetch; and copy's and vector_add's grid (TileBlocks).
Those tests skip where nvcc is missing.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import jax.ffi

from background_runs import BackgroundRuns
from helpers import NVCC, ROOT, progress
from jax_camp import _kernels

DRIVER = r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include "reduce_sum/reduce_sum_launch.cuh"
#include "softmax/softmax_launch.cuh"
using namespace jax_camp;

// A plan for kernels compiled for `architecture` (compute capability x 10) on 132 SMs.
RowLaunch Plan(const RowPolicy& policy, long rows, long cols, int pack, int architecture) {
  return PlanRowLaunch(rows, cols / pack, policy, RowTarget{pack, architecture, 132});
}

__global__ void NoKernel(int) {}

// A cluster plan at a chunk the forward has no cluster kernel for (its cluster
// teams hold 16 packs): the launcher must refuse it, not run the kernel for
// held rows, whose blocks would each reduce their own part of the row.
int Refuse() {
  const RowLaunch plan = {8, 8192, 16, 512, 16, RowLayout::kHeldInCluster};
  const ffi::Error error = LaunchRowKernelAs<softmax::kForwardPolicy, 4>(
      "launching", nullptr, plan, [](auto, auto, auto, const RowLaunch&) { return NoKernel; },
      LaunchScratch{});
  printf("%s\n", error.failure() ? error.message().c_str() : "launched");
  return 0;
}

// copy's and vector_add's grid for `count` packs: one block a tile of 256, or an error.
int Tiles(long long count) {
  const auto blocks = TileBlocks<1>(count, 256, "copy");
  printf("%s\n", blocks.has_value() ? std::to_string(*blocks).c_str() : blocks.error().message().c_str());
  return 0;
}

// The bytes a thread the softmax kernels prefetch: the forward's float32 and
// bfloat16 clusters, float32 held by a block, an unaligned float32 cluster, a
// masked float32 cluster; the backward's float32 and bfloat16 clusters.
int Prefetch() {
  printf("%d %d %d %d %d %d %d\n",
         softmax::kForwardPrefetchBytes<float, 4, 16, RowLayout::kHeldInCluster, false>,
         softmax::kForwardPrefetchBytes<__nv_bfloat16, 8, 8, RowLayout::kHeldInCluster, false>,
         softmax::kForwardPrefetchBytes<float, 4, 16, RowLayout::kHeld, false>,
         softmax::kForwardPrefetchBytes<float, 1, 16, RowLayout::kHeldInCluster, false>,
         softmax::kForwardPrefetchBytes<float, 4, 16, RowLayout::kHeldInCluster, true>,
         softmax::kBackwardPrefetchBytes<float, 4, 8, RowLayout::kHeldInCluster>,
         softmax::kBackwardPrefetchBytes<__nv_bfloat16, 8, 4, RowLayout::kHeldInCluster>);
  return 0;
}

// A plan of `chunk` packs a thread in `lanes` lanes for 1000 rows, in the
// blocks `policy` gives such teams, on a grid with a team for each row or,
// `capped`, for half of them.
RowLaunch ThousandRowPlan(const RowPolicy& policy, int chunk, int lanes, RowLayout layout, bool capped) {
  const int threads = std::max(lanes, TeamBlockThreads(lanes, policy));
  const int teams_a_block = threads / lanes;
  const int blocks = (capped ? 500 : 1000 + teams_a_block - 1) / teams_a_block;
  return {chunk, lanes, blocks, threads, 1, layout, 1000};
}

// The lanes that the reduce_sum kernel chosen for a float32 plan of 8 packs
// a thread and `lanes` lanes is compiled for (0: it reads them at run time),
// for 1000 rows on a grid with a team for each or, `capped`, for half.
template <int kPack, bool kStreamed>
int CompiledLanes(int lanes, bool capped) {
  constexpr RowLayout kLayout = kStreamed ? RowLayout::kStreamed : RowLayout::kHeld;
  const RowLaunch plan = ThousandRowPlan(reduce_sum::kPolicy<float>, 8, lanes, kLayout, capped);
  const auto kernel = reduce_sum::SelectReduceSumKernel<float>{}(
      IntTag<kPack>{}, IntTag<8>{}, RowLayoutTag<kLayout>{}, plan);
  int compiled_for = -1;
  auto check = [&](auto fixed) {
    constexpr int kLanes = decltype(fixed)::value;
    if (kernel == reduce_sum::ReduceSumKernel<float, kPack, 8, kStreamed, kLanes>)
      compiled_for = kLanes;
  };
  check(IntTag<0>{}), check(IntTag<32>{}), check(IntTag<64>{}), check(IntTag<128>{});
  printf("%d\n", compiled_for);
  return 0;
}

// Whether the softmax forward kernel chosen for a float32 plan of 4 packs a
// thread in `lanes` lanes takes one row a team (1) or loops over rows (0),
// for 1000 rows on a grid with a team for each or, `capped`, for half.
template <RowLayout kLayout>
int ForwardTeamPerRow(int lanes, bool capped) {
  const RowLaunch plan = ThousandRowPlan(softmax::kForwardPolicy, 4, lanes, kLayout, capped);
  const auto kernel = softmax::SelectForwardKernel<softmax::Output::kSoftmax, false, float>{}(
      IntTag<4>{}, IntTag<4>{}, RowLayoutTag<kLayout>{}, plan);
  const auto team_per_row =
      softmax::SoftmaxForwardKernel<softmax::Output::kSoftmax, false, float, 4, 4, kLayout, true>;
  printf("%d\n", kernel.function == team_per_row);
  return 0;
}

// A reduce_sum plan's lanes and block threads, and the block threads that its
// kernel, compiled for those lanes, takes as a constant.
template <typename T>
int TeamBlock(long rows, long cols) {
  const RowLaunch plan = Plan(reduce_sum::kPolicy<T>, rows, cols, kPack128<T>, 90);
  printf("%d %d %d\n", plan.lanes, plan.threads, TeamBlockThreads(plan.lanes, reduce_sum::kPolicy<T>));
  return 0;
}

int main(int argc, char** argv) {
  if (!strcmp(argv[1], "refuse")) return Refuse();
  if (!strcmp(argv[1], "team_block")) {
    const long rows = atol(argv[3]), cols = atol(argv[4]);
    return !strcmp(argv[2], "bfloat16") ? TeamBlock<__nv_bfloat16>(rows, cols)
                                        : TeamBlock<float>(rows, cols);
  }
  if (!strcmp(argv[1], "compiled_lanes")) {
    const int lanes = atoi(argv[3]);
    const bool capped = !strcmp(argv[4], "capped");
    if (!strcmp(argv[2], "streamed")) return CompiledLanes<4, true>(lanes, capped);
    return !strcmp(argv[2], "packed") ? CompiledLanes<4, false>(lanes, capped)
                                      : CompiledLanes<1, false>(lanes, capped);
  }
  if (!strcmp(argv[1], "forward_team_per_row")) {
    const int lanes = atoi(argv[3]);
    const bool capped = !strcmp(argv[4], "capped");
    return !strcmp(argv[2], "streamed") ? ForwardTeamPerRow<RowLayout::kStreamed>(lanes, capped)
                                        : ForwardTeamPerRow<RowLayout::kHeld>(lanes, capped);
  }
  if (!strcmp(argv[1], "prefetch")) return Prefetch();
  if (!strcmp(argv[1], "tiles")) return Tiles(atoll(argv[2]));
  return 2;
}
"""


def _driver_command(folder: Path, _: pytest.Config) -> list[str]:
    (folder / "driver.cu").write_text(DRIVER)
    return [NVCC, "-std=c++17", "-O1", "-arch=sm_90", "--expt-relaxed-constexpr",
            f"-I{jax.ffi.include_dir()}", f"-I{ROOT / 'csrc'}", str(folder / "driver.cu"),
            "-o", str(folder / "driver")]


# Compiled while the other tests run (tests/background_runs.py).
RUNS = BackgroundRuns(__name__, {"driver": _driver_command}) if NVCC else None


@pytest.fixture(scope="module")
def driver(request) -> Path:
    """The driver's binary."""
    if NVCC is None:
        pytest.skip("needs nvcc")
    (folder, _, _), = RUNS.wait(request.config, lambda line: progress(request.config, line)).values()
    return folder / "driver"


# The tests' names for the row kernels, as row_plan names them.
ROW_KERNELS = {"forward": "softmax", "backward": "softmax_backward", "reduce": "reduce_sum",
               "reduce16": "reduce_sum"}


def _plan(kernel: str, rows: int, cols: int, pack: int, architecture: int = 90) -> dict:
    """The plan for `kernel` ("reduce16": reduce_sum's 16-bit rows, at any pack) over rows of
    `pack`-element packs (4: float32's 16 bytes, 8: a 16-bit type's, 1: unaligned rows), for
    code compiled for `architecture` on the H200's 132 SMs."""
    item_bytes = 2 if pack == 8 or kernel == "reduce16" else 4
    p = _kernels.row_plan(ROW_KERNELS[kernel], rows, cols, item_bytes, aligned=pack != 1,
                          architecture=architecture)
    assert p["pack"] == pack, p
    return dict(p, holds=p["lanes"] * p["chunk"] >= cols // pack)


@pytest.fixture(scope="module")
def plan():
    return _plan


# (kernel, cols, pack): (team, packs a thread, row held in registers). Teams within a
# block hold the fewest packs that hold the row; clusters and streams the most.
# pack 4 is float32's 16-byte pack, 8 a 16-bit type's, 1 an unaligned row's.
EXPECTED = {
    ("forward", 128, 4): ("8 lanes", 4, True),
    ("forward", 128, 8): ("4 lanes", 4, True),
    ("forward", 64, 4): ("4 lanes", 4, True),
    ("forward", 1024, 4): ("block of 64", 4, True),
    ("forward", 1280, 4): ("block of 64", 5, True),  # a busy grid's: 128 lanes, 3 packs, halved
    ("forward", 8192, 4): ("block of 128", 16, True),
    ("forward", 32768, 4): ("block of 512", 16, True),
    ("forward", 40_000, 4): ("cluster of 2", 16, True),
    ("forward", 262144, 4): ("cluster of 8", 16, True),
    ("forward", 262144, 8): ("cluster of 8", 8, True),
    ("forward", 300_000, 8): ("cluster of 16", 8, True),
    ("forward", 600_000, 8): ("block of 512", 8, False),
    ("forward", 70_001, 1): ("cluster of 16", 16, True),
    ("backward", 1280, 4): ("block of 64", 5, True),
    ("backward", 8192, 4): ("block of 256", 8, True),
    ("backward", 12_000, 4): ("cluster of 2", 8, True),
    ("backward", 20_000, 4): ("cluster of 4", 8, True),
    ("backward", 32768, 8): ("cluster of 4", 4, True),
    ("backward", 40_000, 4): ("cluster of 8", 8, True),
    ("backward", 65_544, 4): ("cluster of 16", 8, True),
    ("backward", 200_000, 4): ("cluster of 16", 8, True),
    ("backward", 300_000, 4): ("block of 512", 8, False),
    ("backward", 40_001, 1): ("cluster of 16", 8, True),
    ("backward", 70_001, 1): ("block of 512", 8, False),
    ("reduce", 128, 8): ("8 lanes", 2, True),
    ("reduce", 1280, 8): ("32 lanes", 5, True),
    ("reduce", 1280, 4): ("64 lanes", 5, True),
    ("reduce", 2304, 8): ("64 lanes", 5, True),
    ("reduce", 3840, 4): ("block of 128", 8, True),
    ("reduce", 16384, 4): ("block of 512", 8, True),
    ("reduce", 16388, 4): ("block of 512", 8, False),
    ("reduce", 32768, 8): ("block of 512", 8, True),
    ("reduce", 262144, 4): ("block of 512", 8, False),
    ("reduce", 4096, 1): ("block of 512", 8, True),
    ("reduce", 4097, 1): ("block of 512", 8, False),
}


def _team(p: dict[str, int]) -> str:
    if p["cluster"] > 1:
        return f"cluster of {p['cluster']}"
    if p["lanes"] < p["threads"]:
        return f"{p['lanes']} lanes"
    return f"block of {p['threads']}"


# The threads of a block that teams share (RowPolicy::rows_block_threads).
ROWS_BLOCK_THREADS = {"forward": 64, "backward": 256, "reduce": 256}


@pytest.mark.parametrize("kernel,cols,pack", list(EXPECTED))
def test_plan(plan, kernel, cols, pack):
    p = plan(kernel, 65536, cols, pack)  # enough rows to fill the GPU: no small-grid lanes
    assert (_team(p), p["chunk"], p["holds"]) == EXPECTED[(kernel, cols, pack)]
    if p["lanes"] < p["threads"]:
        assert p["threads"] == ROWS_BLOCK_THREADS[kernel]
    expected_layout = "streamed" if not p["holds"] else "held_in_cluster" if p["cluster"] > 1 else "held"
    assert p["layout"] == expected_layout
    if p["cluster"] > 1:
        # the backward's clusters of 256-thread blocks grow to 512 only at 16 blocks
        small_blocks = kernel == "backward" and p["lanes"] <= 16 * 256
        assert p["threads"] == (256 if small_blocks else 512)
        assert p["lanes"] == p["threads"] * p["cluster"] and p["blocks"] % p["cluster"] == 0


# The most packs a thread for float32's 16-byte packs: 64 values forward, 32 backward
# (y's and g's chunks), 32 for reduce_sum (128 bytes).
MAX_CHUNK_PACK4 = {"forward": 16, "backward": 8, "reduce": 8}


@pytest.mark.parametrize("kernel", sorted(MAX_CHUNK_PACK4))
def test_teams_within_a_block_hold_the_fewest_packs_that_hold_the_row(plan, kernel):
    """A thread loads at most one pack it does not use (a chunk rounded up to a power of two
    loaded up to three: bfloat16 1008x1280 reduce_sum held 8 packs where 5 hold the row);
    clusters and streamed rows take the most packs a thread."""
    for cols in (8, 40, 136, 1000, 1280, 2304, 3000, 5000, 12_000, 40_000, 300_000):
        p = plan(kernel, 65536, cols, 4)
        packs = cols // 4
        if p["cluster"] == 1 and p["holds"]:
            assert p["lanes"] * (p["chunk"] - 1) < packs <= p["lanes"] * p["chunk"], (cols, p)
        else:
            assert p["chunk"] == MAX_CHUNK_PACK4[kernel], (cols, p)


@pytest.mark.parametrize("kernel,rows,cols,pack,lanes", [
    ("reduce", 144, 1280, 8, 64),    # 32 lanes for many rows; 16-bit sums stop at 64
    ("reduce", 144, 1280, 4, 128),   # 64
    ("reduce", 3, 128, 8, 16),       # one pack a lane at most
    ("forward", 144, 1280, 8, 128),  # 64
    ("backward", 144, 1280, 4, 128), # 64
    ("forward", 144, 1280, 4, 128),  # already 128
    ("reduce", 1008, 1280, 8, 32),   # enough rows: the policy's own
    ("reduce", 3, 2048, 8, 64),      # 64, and 16-bit sums no more
    ("reduce", 3, 2048, 4, 128),     # 64, and float32 sums no more than 128
])
def test_small_grids_take_more_lanes(plan, kernel, rows, cols, pack, lanes):
    """Rows too few to give each SM 128 threads get more lanes, up to one pack each and the
    policy's small_grid_lanes: 128, and 64 for 16-bit sums (pack 8)."""
    assert plan(kernel, rows, cols, pack)["lanes"] == lanes


@pytest.mark.parametrize("kernel,rows,cols,pack,lanes", [
    ("forward", 2032, 2304, 8, 64),   # 128 lanes of 3 packs; 64 of 5
    ("forward", 4080, 1536, 8, 32),   # 64 of 3; 32 of 6
    ("forward", 4080, 1536, 4, 64),   # 128 of 3; 64 of 6, not 32 of 12
    ("forward", 1008, 2304, 8, 128),  # 1008 x 128 threads: not busy
    ("forward", 784, 3840, 8, 128),   # not busy either
    ("forward", 8192, 2048, 8, 64),   # 32 lanes would hold 8 packs
    ("forward", 65536, 128, 8, 4),    # 2 lanes would hold 8 packs, and fewer than min_lanes
    ("forward", 65536, 48, 4, 4),     # 2 lanes would hold 6 packs, but fewer than min_lanes
    ("backward", 2032, 2304, 8, 128), # only the forward's policy halves
    ("reduce", 4080, 1536, 8, 32),    # nor reduce_sum's
])
def test_busy_grids_take_fewer_lanes(plan, kernel, rows, cols, pack, lanes):
    """Rows many enough to give each SM over 1024 threads halve their lanes while each thread
    holds at most the policy's busy_grid_max_chunk packs: 6 for the forward, none elsewhere."""
    assert plan(kernel, rows, cols, pack)["lanes"] == lanes


@pytest.mark.parametrize("kernel,cols,pack,shared", [
    ("reduce", 1280, 4, True), ("reduce", 2304, 8, True),    # 64 lanes
    ("reduce", 3840, 4, False), ("reduce", 8192, 8, True),   # 128: 16-bit teams only
    ("forward", 1024, 4, False), ("backward", 1024, 4, False),  # 64: only warps share for softmax
])
def test_teams_of_warps_share_blocks_for_reduce_sum_only(plan, kernel, cols, pack, shared):
    """RowPolicy::shared_block_lanes: reduce_sum's 64-lane teams take 4 rows a 256-thread block, and
    its 16-bit 128-lane teams 2; wider teams, and softmax's teams past a warp, take a block each."""
    p = plan(kernel, 65536, cols, pack)
    assert p["lanes"] > 32 and (p["threads"] == 256 and p["lanes"] < 256) == shared
    assert shared or p["threads"] == p["lanes"]


@pytest.mark.parametrize("kernel,rows,cols,pack,lanes", [
    ("reduce", 784, 3840, 8, 128),    # 64 lanes would hold 8 packs: 128 of 4
    ("reduce", 100, 3840, 8, 128),    # after the small grid's 64 too
    ("reduce", 784, 3584, 8, 64),     # 64 of 7
    ("reduce", 2032, 2304, 8, 64),    # 64 of 5
    ("reduce", 8192, 3840, 8, 64),    # busy: 8192 x 64 threads
    ("reduce", 784, 3840, 4, 128),    # float32 sums keep their 8 packs at 128 lanes
    ("reduce", 784, 4096, 4, 128),
    ("reduce16", 784, 301, 1, 32),    # unaligned 16-bit rows keep 10 values a thread
])
def test_quiet_grids_keep_16_bit_sums_to_7_packs_a_thread(plan, kernel, rows, cols, pack, lanes):
    """reduce_sum's quiet_grid_max_chunk: a 16-bit grid of at most 1024 threads an SM doubles its
    rows' lanes while a thread would hold 8 16-byte packs, up to the 128 lanes that share a block."""
    assert plan(kernel, rows, cols, pack)["lanes"] == lanes


# Row lengths whose plans on Hopper (compute capability 9.0) hold rows in clusters, prefetch by
# bulk copies, or neither, for every row kernel and pack.
ARCHITECTURE_CASES = [
    (kernel, cols, pack)
    for kernel in ("forward", "backward", "reduce")
    for cols, pack in ((1280, 4), (8192, 4), (12_000, 4), (40_000, 4), (40_000, 1), (70_001, 1),
                       (150_000, 4), (262144, 4), (262144, 8), (600_000, 8))
]


@pytest.mark.parametrize("kernel,cols,pack", ARCHITECTURE_CASES)
@pytest.mark.parametrize("rows", [3, 4096])
def test_plans_use_hopper_paths_only_for_code_compiled_for_hopper(plan, kernel, cols, pack, rows):
    """The planner takes the architecture the loaded kernels were compiled for (KernelArchitecture),
    not the device's: code for compute capability 8.0 (an A100, or sm_80 PTX that an H200 compiles)
    has no clusters and no bulk copies, so its plans never take them; rows that a cluster would hold
    take one block, which streams them where its registers cannot hold them, and every other plan
    is Hopper's."""
    hopper = plan(kernel, rows, cols, pack, architecture=90)
    ampere = plan(kernel, rows, cols, pack, architecture=80)
    assert ampere["cluster"] == 1 and not ampere["prefetches"]
    assert ampere["layout"] != "held_in_cluster"
    if hopper["cluster"] > 1:  # one block of the policy's most threads, holding or streaming
        assert ampere["threads"] == 512
        assert ampere["layout"] == ("held" if ampere["holds"] else "streamed")
    else:
        assert ampere == hopper


def test_plans_take_clusters_on_hopper(plan):
    """Test above, the other way round: on 9.0 the long rows above do take clusters and prefetch."""
    assert plan("forward", 3, 40_000, 4, architecture=90)["cluster"] == 2
    assert plan("forward", 3, 262144, 4, architecture=90)["prefetches"]
    assert plan("backward", 4096, 20_000, 4, architecture=90)["cluster"] == 4


def test_grid_is_capped_and_whole_clusters(plan):
    p = plan("backward", 4096, 32768, 4)
    assert p["cluster"] == 4 and p["blocks"] % 4 == 0 and p["blocks"] < 4096 * 4
    assert p["blocks"] == 132 * (2048 // 256) * 4  # clusters: 4 waves of resident blocks
    p = plan("forward", 1048576, 128, 4)
    assert p["threads"] == 64 and p["blocks"] == 132 * (2048 // 64) * 8  # others 8, rows looped over
    p = plan("forward", 262144, 128, 4)
    assert p["blocks"] == 262144 // (64 // 8)  # fewer: a team a row


@pytest.mark.parametrize("rows,lanes,grid,compiled_for", [
    ("packed", 32, "whole", 32), ("packed", 64, "whole", 64), ("packed", 128, "whole", 128),
    ("packed", 64, "capped", 0), ("packed", 8, "whole", 0), ("packed", 256, "whole", 0),
    ("unaligned", 64, "whole", 0), ("streamed", 512, "whole", 0),
])
def test_sums_of_short_packed_rows_have_their_lanes_compiled_in(driver, rows, lanes, grid, compiled_for):
    """SelectReduceSumKernel: held rows in 16-byte packs of 32, 64 and 128 lanes (the camp's shapes),
    on a grid with a team for every row, get a kernel compiled for their lanes that sums one row a
    team; capped grids, other lanes, unaligned and streamed rows read them and loop over rows."""
    out = subprocess.run([str(driver), "compiled_lanes", rows, str(lanes), grid],
                         capture_output=True, text=True, check=True).stdout
    assert int(out) == compiled_for


@pytest.mark.parametrize("layout,lanes,grid,team_per_row", [
    ("held", 32, "whole", 1), ("held", 128, "whole", 1), ("held", 512, "whole", 1),
    ("held", 8, "whole", 0), ("held", 128, "capped", 0), ("streamed", 512, "whole", 0),
])
def test_softmax_forward_takes_a_row_a_team_on_grids_with_a_team_for_each(
        driver, layout, lanes, grid, team_per_row):
    """SelectForwardKernel: rows held by a warp or more, on a grid with a team for every row, get
    the kernel with no loop over rows; capped grids, teams of a few lanes and streamed rows loop."""
    out = subprocess.run([str(driver), "forward_team_per_row", layout, str(lanes), grid],
                         capture_output=True, text=True, check=True).stdout
    assert int(out) == team_per_row


@pytest.mark.parametrize("cols,pack", [(512, 4), (1024, 8)])
def test_softmax_capped_grid_shapes_take_warp_teams(plan, cols, pack):
    """tests/test_softmax.py's test_warp_teams_loop_over_rows_on_capped_grids: 70_000 rows of
    128 packs must plan warp teams on a grid with fewer teams than rows."""
    p = plan("forward", 70_000, cols, pack)
    assert p["lanes"] == 32 and p["layout"] == "held"
    assert p["blocks"] * (p["threads"] // p["lanes"]) < 70_000


@pytest.mark.parametrize("dtype,rows,cols,lanes", [
    ("float32", 65536, 512, 32), ("float32", 4080, 1536, 64), ("float32", 2032, 2304, 128),
    ("float32", 144, 1280, 128), ("bfloat16", 1008, 1280, 32), ("bfloat16", 2032, 2304, 64),
    ("bfloat16", 784, 3840, 128), ("bfloat16", 8192, 8192, 128),
])
def test_sums_compiled_for_their_lanes_get_the_blocks_they_assume(driver, dtype, rows, cols, lanes):
    """A reduce_sum kernel compiled for its lanes takes its block's threads as a constant
    (TeamBlockThreads); its plan must launch it in blocks of that many threads."""
    out = subprocess.run([str(driver), "team_block", dtype, str(rows), str(cols)],
                         capture_output=True, text=True, check=True).stdout
    planned_lanes, threads, assumed = map(int, out.split())
    assert (planned_lanes, threads) == (lanes, assumed)


def test_launcher_refuses_a_plan_it_has_no_kernel_for(driver):
    out = subprocess.run([str(driver), "refuse"], capture_output=True, text=True, check=True).stdout
    assert "no kernel for this plan" in out


def test_softmax_kernels_prefetch_16_byte_packs_only(driver):
    """As softmax_kernel.cuh says (kForwardPrefetchBytes, kBackwardPrefetchBytes): a thread's
    packs of the next row (y's and g's for the backward) where the row is held in a cluster in
    16-byte packs, whatever the dtype; nothing for rows held by a block, unaligned rows, or
    where='s masked kernels."""
    out = subprocess.run([str(driver), "prefetch"], capture_output=True, text=True, check=True).stdout
    assert list(map(int, out.split())) == [256, 128, 0, 0, 0, 256, 128]


@pytest.mark.parametrize("kernel,cols,pack,prefetches", [
    ("forward", 32768, 4, False), ("forward", 40_000, 4, False), ("forward", 131_072, 4, False),
    ("forward", 150_000, 4, True), ("forward", 262144, 4, True), ("forward", 300_000, 4, True),
    ("forward", 262144, 8, True),
    ("backward", 32768, 4, False), ("backward", 65536, 4, False), ("backward", 131_072, 4, False),
    ("backward", 150_000, 4, True), ("backward", 262144, 4, True), ("backward", 262144, 8, True),
])
def test_plans_prefetch_in_clusters_of_8_or_more_large_blocks(plan, kernel, cols, pack, prefetches):
    """The launcher's rule (PrefetchSharedBytes): clusters of kMinPrefetchClusterBlocks or more, of
    blocks of kMinPrefetchBlockThreads or more (the backward's clusters of 256-thread blocks ran
    slower prefetching). tests/test_softmax.py has shapes that reach these plans."""
    p = plan(kernel, 3, cols, pack)
    assert p["prefetches"] == prefetches  # where the kernel has bytes to prefetch
    assert not prefetches or (p["cluster"] >= 8 and p["threads"] == 512)


@pytest.mark.parametrize("packs,expected", [
    (0, "1"), (1, "1"), (256, "1"), (257, "2"),
    ((2**31 - 1) * 256, str(2**31 - 1)),
    ((2**31 - 1) * 256 + 1, "copy: more elements than one grid of 2^31 - 1 blocks covers"),
])
def test_elementwise_grid_covers_the_array_or_refuses(driver, packs, expected):
    """One tile a block and no loop (ForBlockTile): a count one grid cannot cover is an error."""
    out = subprocess.run([str(driver), "tiles", str(packs)], capture_output=True, text=True, check=True).stdout
    assert out.strip() == expected
