"""How many thread-block clusters a GPU keeps resident at once, asked of the CUDA driver.

A row held over a cluster runs fastest when the grid is one wave of the clusters that fit the
GPU at once (``_rows.wave_row_groups``), and that count is the GPU's, not its SMs over the
cluster's blocks: a cluster must sit within one GPC, so the larger ones leave some SMs idle
(docs/tilelang.md gives the H200's counts). The driver answers for a kernel
and a launch shape (``cuOccupancyMaxActiveClusters``), so this asks it of an empty kernel with
the cluster tile's block: MAX_THREADS threads and enough dynamic shared memory that one block
fills an SM, as a cluster tile's block does. ctypes on ``libcuda`` keeps the query free of any
build step; the driver is there wherever JAX runs on a GPU.
"""

from __future__ import annotations

import ctypes

# An empty kernel that may take up to 1024 threads a block; the driver JIT-compiles its PTX
# for any GPU from sm_90 on, the first with clusters.
_EMPTY_KERNEL_PTX = b""".version 8.0
.target sm_90
.address_size 64
.visible .entry empty() .maxntid 1024, 1, 1 { ret; }
"""
_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8   # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
_CLUSTER_DIMENSION = 4               # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION


class _LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute: an id, then a 64-byte union whose cluster form is three uints."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_uint * 16)]


class _LaunchConfig(ctypes.Structure):
    """CUlaunchConfig."""

    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("shared_bytes", ctypes.c_uint), ("stream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_LaunchAttribute)), ("num_attrs", ctypes.c_uint)]


def resident_clusters(device: int, sizes: tuple[int, ...], threads: int,
                      shared_bytes: int) -> dict[int, int]:
    """For each cluster size in ``sizes``, how many clusters of blocks of ``threads`` threads
    and ``shared_bytes`` of dynamic shared memory GPU ``device`` (a CUDA ordinal) keeps
    resident at once. Raises RuntimeError naming the driver call that failed."""
    driver = ctypes.CDLL("libcuda.so.1")

    def check(status: int, call: str) -> None:
        if status != 0:
            raise RuntimeError(f"jax_camp's TileLang bridge: {call} failed (CUresult {status}) "
                               "asking the driver how many thread-block clusters fit the GPU")

    check(driver.cuInit(0), "cuInit")
    handle, context = ctypes.c_int(), ctypes.c_void_p()
    check(driver.cuDeviceGet(ctypes.byref(handle), device), "cuDeviceGet")
    check(driver.cuDevicePrimaryCtxRetain(ctypes.byref(context), handle), "cuDevicePrimaryCtxRetain")
    try:
        check(driver.cuCtxPushCurrent_v2(context), "cuCtxPushCurrent")
        try:
            module, kernel = ctypes.c_void_p(), ctypes.c_void_p()
            check(driver.cuModuleLoadData(ctypes.byref(module), _EMPTY_KERNEL_PTX), "cuModuleLoadData")
            try:
                check(driver.cuModuleGetFunction(ctypes.byref(kernel), module, b"empty"),
                      "cuModuleGetFunction")
                check(driver.cuFuncSetAttribute(kernel, _MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_bytes),
                      "cuFuncSetAttribute")
                return {size: _clusters_of(driver, check, kernel, size, threads, shared_bytes)
                        for size in sizes}
            finally:
                driver.cuModuleUnload(module)
        finally:
            driver.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
    finally:
        driver.cuDevicePrimaryCtxRelease_v2(handle)


def _clusters_of(driver, check, kernel, size: int, threads: int, shared_bytes: int) -> int:
    """cuOccupancyMaxActiveClusters for one cluster size."""
    cluster = _LaunchAttribute(id=_CLUSTER_DIMENSION)
    cluster.value[0:3] = [size, 1, 1]
    config = _LaunchConfig(shared_bytes=shared_bytes, attrs=ctypes.pointer(cluster), num_attrs=1)
    config.grid[:] = [size, 1, 1]
    config.block[:] = [threads, 1, 1]
    count = ctypes.c_int()
    check(driver.cuOccupancyMaxActiveClusters(ctypes.byref(count), kernel, ctypes.byref(config)),
          "cuOccupancyMaxActiveClusters")
    return count.value
