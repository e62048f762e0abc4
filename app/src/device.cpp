#include "device.h"

#include <torch/cuda.h>

#include <string>

#include "app_error.h"

namespace fusedops_app {

c10::Device parse_device(const std::string& text, const std::string& option) {
  c10::Device device(c10::kCPU);
  if (text.empty()) {
    throw UsageError("invalid " + option + " '': expected cpu, cuda or cuda:N, got an empty "
                     "entry");
  }
  try {
    device = c10::Device(text);
  } catch (const c10::Error&) {
    throw UsageError("invalid " + option + " '" + text + "': expected cpu, cuda or cuda:N");
  }
  if (device.is_cpu()) {
    // One CPU device: "cpu:1" names nothing (scripted/export.py refuses it too).
    if (device.has_index() && device.index() != 0) {
      throw UsageError("invalid " + option + " '" + text +
                       "': expected cpu, cuda or cuda:N (there is one CPU device, cpu or cpu:0)");
    }
    return c10::Device(c10::kCPU);
  }
  if (!device.is_cuda()) {
    throw UsageError("unsupported " + option + " '" + text + "': fusedops runs on cpu or cuda");
  }
  const auto gpu_count = static_cast<int64_t>(torch::cuda::device_count());
  if (gpu_count == 0) {
    throw UsageError(option + " " + text +
                     ": CUDA is not available here (no GPU visible to libtorch: check "
                     "nvidia-smi, the driver and CUDA_VISIBLE_DEVICES); use --device cpu");
  }
  if (device.has_index() && device.index() >= gpu_count) {
    throw UsageError(option + " " + text + ": no such GPU, this machine has " +
                     std::to_string(gpu_count) + " (cuda:0 to cuda:" +
                     std::to_string(gpu_count - 1) + ")");
  }
  // A bare "cuda" means the current GPU; naming it keeps logs and .to() unambiguous.
  return device.has_index() ? device : c10::Device(c10::kCUDA, 0);
}

void synchronize(const c10::Device& device) {
  if (device.is_cuda()) {
    torch::cuda::synchronize(device.index());
  }
}

}  // namespace fusedops_app
