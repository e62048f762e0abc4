// What the planner needs to know of a CUDA device, read once per device: a steady-state call
// makes no device-property query (cudaGetDeviceProperties and attribute reads are driver calls).
#pragma once

#include <c10/core/Device.h>

#include "plan/planner.h"

namespace fusedops::cuda {

plan::DeviceFacts device_facts(c10::DeviceIndex index);

}  // namespace fusedops::cuda
