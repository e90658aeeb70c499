// The Python module `jax_camp._kernels`: registrations() returns, per XLA
// platform name, the FFI handlers as capsules keyed by target name.
#include <nanobind/nanobind.h>

#include <stdexcept>
#include <string>

#include "handlers.h"

namespace nb = nanobind;

namespace {

template <typename Handler>
nb::capsule Capsule(Handler* handler) {
  static_assert(std::is_invocable_r_v<XLA_FFI_Error*, Handler, XLA_FFI_CallFrame*>,
                "an FFI handler takes a call frame");
  return nb::capsule(reinterpret_cast<void*>(handler));
}

nb::dict Registrations() {
  nb::dict cpu;
  cpu["jax_camp_copy"] = Capsule(JaxCampCopyCpu);
  cpu["jax_camp_vector_add"] = Capsule(JaxCampVectorAddCpu);
  cpu["jax_camp_reduce_sum"] = Capsule(JaxCampReduceSumCpu);
  cpu["jax_camp_softmax"] = Capsule(JaxCampSoftmaxCpu);
  cpu["jax_camp_softmax_backward"] = Capsule(JaxCampSoftmaxBackwardCpu);
  nb::dict platforms;
  platforms["cpu"] = cpu;
#ifdef JAX_CAMP_WITH_CUDA
  nb::dict cuda;
  cuda["jax_camp_copy"] = Capsule(JaxCampCopyCuda);
  cuda["jax_camp_vector_add"] = Capsule(JaxCampVectorAddCuda);
  cuda["jax_camp_reduce_sum"] = Capsule(JaxCampReduceSumCuda);
  cuda["jax_camp_softmax"] = Capsule(JaxCampSoftmaxCuda);
  cuda["jax_camp_softmax_backward"] = Capsule(JaxCampSoftmaxBackwardCuda);
  platforms["CUDA"] = cuda;
#endif
  return platforms;
}

}  // namespace

NB_MODULE(_kernels, m) {
  m.doc() = "jax_camp's XLA FFI handlers (host and, when built with nvcc, CUDA).";
  m.def("registrations", &Registrations,
        "Handlers by XLA platform name ('cpu', 'CUDA'), each a dict of target name to capsule.");
#ifdef JAX_CAMP_WITH_CUDA
  m.attr("built_with_cuda") = true;
  // CMake's CUDA architectures for this build ("80-real", ...), and whether
  // they are the project's default or the user's.
  m.attr("cuda_architectures") = nb::str(JAX_CAMP_CUDA_ARCHITECTURES);
  m.attr("cuda_architectures_chosen_by") = nb::str(JAX_CAMP_CUDA_ARCHITECTURES_CHOSEN_BY);
  m.def(
      "kernel_architecture",
      [] {
        std::string error;
        const int architecture = JaxCampKernelArchitecture(&error);
        if (architecture < 0) throw std::runtime_error(error);
        return architecture;
      },
      "The compute capability x 10 that the CUDA kernels loaded on the current GPU were compiled "
      "for: the planner's Hopper paths need 90 or more.");
#else
  m.attr("built_with_cuda") = false;
#endif
}
