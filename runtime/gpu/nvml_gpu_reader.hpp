#pragma once
/// @file
/// Reading one NVIDIA GPU into v1::Gpu on its call thread: identity, NUMA
/// node, metrics, memory errors, NVLinks, fabric state and the recovery
/// action, each call timed (runtime/gpu/nvml_call_thread.hpp). A field NVML
/// cannot answer is left out and named in `unknown_fields`; a call that
/// answers NVML_ERROR_GPU_IS_LOST makes the GPU `lost`.
/// Internal to the NVIDIA prober (runtime/gpu/nvml*.cpp).

#include "messages/astraeus.pb.h"
#include "runtime/gpu/nvml.hpp"
#include "runtime/gpu/nvml_abi.hpp"
#include "runtime/gpu/nvml_call_thread.hpp"

namespace astraeus::nvml_abi {

/// Reads GPU `index` through `api` into `gpu`, on the thread of `w` (from
/// inside a job posted to it). Throws job_abandoned when the prober gave
/// up on the thread while a call ran.
void read_gpu(const nvml_api& api, worker_state& w, const nvml_options& opts, unsigned index,
              v1::Gpu& gpu);

} // namespace astraeus::nvml_abi
