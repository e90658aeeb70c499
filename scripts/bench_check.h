// The scripts' CUDA benchmarks stop at the first failed CUDA call, naming it.
#pragma once

#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#define BENCH_CHECK(call)                                                             \
  do {                                                                                \
    cudaError_t status_ = (call);                                                     \
    if (status_ != cudaSuccess) {                                                     \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(status_)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)
