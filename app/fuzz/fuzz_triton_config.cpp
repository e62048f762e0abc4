// parse_triton_config + check_triton_config: config.pbtxt against Triton's schema and model 98.
#include <cstddef>
#include <cstdint>
#include <string>

#include "app_error.h"
#include "triton_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  fusedops_app::TritonConfigExpectation expected;
  expected.model_name = "fusedops_98_matmul_avgpool_gelu_scale_max";
  expected.model_file = "model.pt";
  expected.platform = "pytorch_libtorch";
  expected.input = {"INPUT__0", "TYPE_FP32", {32, 256}};
  expected.output = {"OUTPUT__0", "TYPE_FP32", {32}};
  try {
    fusedops_app::check_triton_config(fusedops_app::parse_triton_config(text, "fuzz"), expected,
                                      "fuzz");
  } catch (const fusedops_app::UsageError&) {
  }
  return 0;
}
