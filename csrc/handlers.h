// Every XLA FFI handler jax_camp defines, host and CUDA; module.cc hands
// them to Python. The CUDA handlers carry the kCmdBufferCompatible trait:
// they only launch kernels (and a memset) on XLA's stream and allocate
// nothing, so XLA may record them into a CUDA graph instead of paying a host
// launch for each call.
#pragma once

#include <string>

#include "xla/ffi/api/api.h"

XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxCampCopyCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxCampVectorAddCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxCampReduceSumCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxCampSoftmaxCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxCampSoftmaxBackwardCpu);

#ifdef JAX_CAMP_WITH_CUDA
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxCampCopyCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxCampVectorAddCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxCampReduceSumCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxCampSoftmaxCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxCampSoftmaxBackwardCuda);

// The compute capability (major * 10 + minor) that the CUDA kernels were
// compiled for, as loaded on the current GPU; -1 with `error` set on failure.
int JaxCampKernelArchitecture(std::string* error);
#endif
