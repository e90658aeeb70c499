// The Python module `jax_camp._kernels`: registrations() returns, per XLA
// platform name, the FFI handlers as capsules keyed by target name (in a build
// without CUDA, its GPU targets all take the handler that says so).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <stdexcept>
#include <string>

#include "common/ffi_common.h"
#include "handlers.h"
#include "reduce_sum/reduce_sum_policy.h"
#include "softmax/softmax_policy.h"

namespace nb = nanobind;

namespace {

template <typename Handler>
nb::capsule Capsule(Handler* handler) {
  static_assert(std::is_invocable_r_v<XLA_FFI_Error*, Handler, XLA_FFI_CallFrame*>,
                "an FFI handler takes a call frame");
  return nb::capsule(reinterpret_cast<void*>(handler));
}

#ifndef JAX_CAMP_WITH_CUDA
// Every GPU target of a build without CUDA: it takes any operands and says why
// it cannot run them, where XLA alone would report a target it cannot find.
jax_camp::ffi::Error CudaNotBuilt(jax_camp::ffi::RemainingArgs, jax_camp::ffi::RemainingRets) {
  return jax_camp::ffi::Error(
      jax_camp::ffi::ErrorCode::kUnimplemented,
      "jax_camp was built without its CUDA kernels (nvcc was not found when it was "
      "installed, or JAX_CAMP_CUDA=OFF), so its ops cannot run on a GPU with the default "
      "backend: reinstall it where nvcc is found (pip install .), or pass backend='tilelang' "
      "or 'xla', or run on the CPU");
}
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxCampCudaNotBuilt, CudaNotBuilt,
                              jax_camp::ffi::Ffi::Bind().RemainingArgs().RemainingRets());
#endif

nb::dict Registrations() {
  nb::dict platforms;
  nb::dict cpu;
#define JAX_CAMP_OP(name)
#define JAX_CAMP_TARGET(target, Handler) cpu[#target] = Capsule(JaxCamp##Handler##Cpu);
#include "ops.inc"
#undef JAX_CAMP_TARGET
  platforms["cpu"] = cpu;
  // A build without CUDA still names every target on the GPU, by the handler
  // that says why it cannot run there.
  nb::dict cuda;
#ifdef JAX_CAMP_WITH_CUDA
#define JAX_CAMP_TARGET(target, Handler) cuda[#target] = Capsule(JaxCamp##Handler##Cuda);
#else
#define JAX_CAMP_TARGET(target, Handler) cuda[#target] = Capsule(JaxCampCudaNotBuilt);
#endif
#include "ops.inc"
#undef JAX_CAMP_TARGET
  platforms["CUDA"] = cuda;
#undef JAX_CAMP_OP
  return platforms;
}

// The plan the CUDA launcher makes for a row kernel ("reduce_sum", "softmax",
// "softmax_masked", "softmax_backward" or one of log_softmax's, which run
// softmax's under its policies) over rows of `cols` elements of `item_bytes`
// bytes, for the tests that check which shapes reach which kernel path. Host
// code: it needs no GPU, and CPU-only builds have it too.
nb::dict RowPlan(const std::string& kernel, int64_t rows, int64_t cols, int item_bytes,
                 bool aligned, int architecture, int sm_count) {
  using namespace jax_camp;
  if (item_bytes != 2 && item_bytes != 4)
    throw std::invalid_argument("item_bytes must be 2 or 4");
  // The chunks of a row a softmax kernel holds: the forward's x, the backward's y and g.
  const bool masked = kernel == "softmax_masked" || kernel == "log_softmax_masked";
  const int chunks = kernel == "softmax" || kernel == "log_softmax" || masked ? 1
                     : kernel == "softmax_backward" || kernel == "log_softmax_backward" ||
                             kernel == "log_softmax_tangent"
                         ? 2
                         : 0;
  if (chunks == 0 && kernel != "reduce_sum")
    throw std::invalid_argument("no row kernel " + kernel);
  const RowPolicy policy = chunks == 1   ? softmax::kForwardPolicy
                           : chunks == 2 ? softmax::kBackwardPolicy
                                         : reduce_sum::PolicyFor(item_bytes);
  const int pack = RowPack(item_bytes, cols, aligned);
  const RowLaunch plan =
      PlanRowLaunch(rows, cols / pack, policy, RowTarget{pack, architecture, sm_count});
  const char* layouts[] = {"held", "held_in_cluster", "streamed"};
  // Masked kernels do not prefetch (kForwardPrefetchBytes).
  const int prefetch_bytes =
      masked ? 0
             : PrefetchSharedBytes(plan, softmax::PrefetchBytesPerThread(chunks, item_bytes, pack,
                                                                         plan.chunk, plan.layout));
  nb::dict out;
  out["pack"] = pack;
  out["chunk"] = plan.chunk;
  out["lanes"] = plan.lanes;
  out["blocks"] = plan.blocks;
  out["threads"] = plan.threads;
  out["cluster"] = plan.cluster;
  out["layout"] = layouts[static_cast<int>(plan.layout)];
  out["prefetches"] = prefetch_bytes > 0;
  return out;
}

// Whether softmax's unmasked forward call (log_softmax's too) over `rows` rows of
// `cols` values brings a row counter as scratch: only where its kernels may claim rows.
bool NeedsRowCounter(int64_t rows, int64_t cols) {
  return jax_camp::MayClaimRows(jax_camp::softmax::kForwardPolicy, rows, cols);
}

}  // namespace

NB_MODULE(_kernels, m) {
  m.doc() = "jax_camp's XLA FFI handlers (host and, when built with nvcc, CUDA).";
  m.def("registrations", &Registrations,
        "Handlers by XLA platform name ('cpu', 'CUDA'), each a dict of target name to capsule.");
  m.def("row_plan", &RowPlan, nb::arg("kernel"), nb::arg("rows"), nb::arg("cols"),
        nb::arg("item_bytes"), nb::arg("aligned") = true, nb::arg("architecture") = 90,
        nb::arg("sm_count") = 132,
        "The CUDA launcher's plan for a row kernel (defaults: aligned rows, code for "
        "compute capability 9.0, the H200's 132 SMs).");
  m.def("needs_row_counter", &NeedsRowCounter, nb::arg("rows"), nb::arg("cols"),
        "Whether softmax's and log_softmax's unmasked forward call over rows x cols brings "
        "the row counter its long-row kernels claim rows on (a scratch result).");
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
