// The --device option: parsed and checked against the machine before any model is loaded.
#pragma once

#include <c10/core/Device.h>

#include <string>

namespace fusedops_app {

// "cpu", "cuda" or "cuda:N". Throws UsageError, naming `option`, when the text is not a device
// or when CUDA is asked for and this machine (or this libtorch) has no such GPU.
c10::Device parse_device(const std::string& text, const std::string& option = "--device");

// Waits for the device's queued work, so that a wall-clock timing covers the kernels.
void synchronize(const c10::Device& device);

}  // namespace fusedops_app
