#include "cuda/device_facts.h"

#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <array>
#include <mutex>

#include "cuda/gemm/sm90_kernels.h"  // sm90_kernels_built

namespace fusedops::cuda {

plan::DeviceFacts device_facts(c10::DeviceIndex index) {
  constexpr int kMaxDevices = 64;
  static std::array<std::once_flag, kMaxDevices> once;
  static std::array<plan::DeviceFacts, kMaxDevices> facts;
  TORCH_CHECK(index >= 0 && index < kMaxDevices, "fusedops: CUDA device index ", index,
              " out of range [0, ", kMaxDevices, ")");
  std::call_once(once[index], [&] {
    plan::DeviceFacts f;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&f.major, cudaDevAttrComputeCapabilityMajor, index));
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&f.minor, cudaDevAttrComputeCapabilityMinor, index));
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&f.sm_count, cudaDevAttrMultiProcessorCount, index));
    f.sm90_kernels = gemm::sm90_kernels_built();
    facts[index] = f;
  });
  return facts[index];
}

}  // namespace fusedops::cuda
