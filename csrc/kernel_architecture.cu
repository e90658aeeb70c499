// The architecture the CUDA kernels run as on the current GPU, for the Python
// module (kernel_architecture()): every .cu file is built with the same
// flags, so this file's answer is theirs.
#include <string>

#include "common/cuda_common.cuh"
#include "handlers.h"

int JaxCampKernelArchitecture(std::string* error) {
  const auto architecture = jax_camp::KernelArchitecture();
  if (architecture.has_value()) return *architecture;
  *error = architecture.error().message();
  return -1;
}
