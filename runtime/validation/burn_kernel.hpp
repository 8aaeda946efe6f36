#pragma once
/// @file
/// The burn-in's kernel: runtime/validation/burn_kernel.ptx (handwritten
/// PTX), embedded at build time (runtime/CMakeLists.txt) and loaded with
/// cuModuleLoadData.

namespace astraeus::validation {

/// The PTX text, NUL-terminated, as cuModuleLoadData takes it.
extern const char* const burn_kernel_ptx;

/// The kernel's entry point: astraeus_burn(float* out, unsigned iters).
inline constexpr const char* burn_kernel_name = "astraeus_burn";

/// Floating-point operations per thread and iteration (8 FMAs).
inline constexpr double burn_flops_per_iteration = 16;

}  // namespace astraeus::validation
