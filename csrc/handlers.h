// Every XLA FFI handler jax_camp defines (ops.inc), host and CUDA; module.cc
// hands them to Python. The CUDA handlers carry the kCmdBufferCompatible trait:
// they only launch kernels (and a memset) on XLA's stream and allocate
// nothing, so XLA may record them into a CUDA graph instead of paying a host
// launch for each call.
#pragma once

#include <string>

#include "xla/ffi/api/api.h"

#define JAX_CAMP_OP(name)
#ifdef JAX_CAMP_WITH_CUDA
#define JAX_CAMP_TARGET(target, Handler)             \
  XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxCamp##Handler##Cpu); \
  XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxCamp##Handler##Cuda);
#else
#define JAX_CAMP_TARGET(target, Handler) XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxCamp##Handler##Cpu);
#endif
#include "ops.inc"
#undef JAX_CAMP_OP
#undef JAX_CAMP_TARGET

#ifdef JAX_CAMP_WITH_CUDA
// The compute capability (major * 10 + minor) that the CUDA kernels were
// compiled for, as loaded on the current GPU; -1 with `error` set on failure.
int JaxCampKernelArchitecture(std::string* error);
#endif
