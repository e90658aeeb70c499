# The CUDA architectures jax_camp builds for, included before
# enable_language(CUDA): machine code for A100 (sm_80) and H100/H200 (sm_90),
# PTX for later GPUs, unless the user names others (CMAKE_CUDA_ARCHITECTURES
# or the CUDAARCHS environment variable). It must come first because
# enable_language fills in the compiler's own default (sm_75 for CUDA 13),
# and an H200 would run that PTX without any of Hopper's paths.
if(DEFINED CMAKE_CUDA_ARCHITECTURES OR DEFINED ENV{CUDAARCHS})
  set(JAX_CAMP_CUDA_ARCHITECTURES_CHOSEN_BY user)
else()
  set(CMAKE_CUDA_ARCHITECTURES 80-real 90-real 90-virtual)
  set(JAX_CAMP_CUDA_ARCHITECTURES_CHOSEN_BY default)
endif()
