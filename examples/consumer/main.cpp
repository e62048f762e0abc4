// A host that uses fusedops only through the PyTorch dispatcher and TorchScript: it includes
// no fusedops header and calls no fusedops:: function. That it finds the operators proves
// the package config keeps libfusedops loaded (its TORCH_LIBRARY registrations ran).
//
//   fusedops_consumer                          call one operator by name, compare with ATen
//   fusedops_consumer MODEL.pt [INPUT.pt]      also load an exported model and run it
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/script.h>

#include <exception>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <vector>

namespace {

constexpr const char* kOperator = "fusedops::matmul_sum_max_avgpool_logsumexp_logsumexp";

// Model 18 through the dispatcher, against the same math in plain ATen.
bool call_operator_by_name() {
  const auto op = c10::Dispatcher::singleton()
                      .findSchemaOrThrow(kOperator, "")
                      .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                        std::optional<bool>, c10::string_view)>();
  // x, weight, bias, cache_folds (nullopt: the raw op's default rule), numerics
  const at::Tensor x = at::rand({8, 64});
  const at::Tensor weight = at::randn({32, 64});
  const at::Tensor bias = at::randn({32});
  const at::Tensor fused = op.call(x, weight, bias, /*cache_folds=*/std::nullopt, /*numerics=*/"accurate");
  const at::Tensor expected = at::linear(x, weight, bias).sum(1, /*keepdim=*/true);
  const bool close = at::allclose(fused, expected, /*rtol=*/1e-4, /*atol=*/1e-4);
  std::cout << kOperator << ": output " << fused.sizes() << ", "
            << (close ? "matches" : "DIFFERS FROM") << " linear(x).sum(1)\n";
  return close;
}

// scripted/export.py stores tensors with torch.save; torch::jit::pickle_load reads them without
// running code. This example trusts the file: fusedops_app also verifies the model folder's
// digests and checks the tensor's extent against its storage (app/README.md).
at::Tensor load_sample(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  const std::vector<char> bytes{std::istreambuf_iterator<char>(file),
                                std::istreambuf_iterator<char>()};
  return torch::jit::pickle_load(bytes).toTensor();
}

void run_model(const std::string& model_path, const std::string& input_path) {
  torch::jit::Module model = torch::jit::load(model_path);
  at::Tensor input;
  if (!input_path.empty()) {
    input = load_sample(input_path);
  } else {
    // Every fusedops model takes (batch, in_features) and the first weight is (out, in).
    const at::Tensor first_weight = (*model.parameters().begin());
    input = at::rand({4, first_weight.size(1)});
  }
  c10::InferenceMode no_autograd;
  const at::Tensor output = model.forward({input}).toTensor();
  std::cout << model_path << ": input " << input.sizes() << " -> output " << output.sizes()
            << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (!call_operator_by_name()) {
      return 1;
    }
    if (argc > 1) {
      run_model(argv[1], argc > 2 ? argv[2] : "");
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "fusedops_consumer: " << e.what() << "\n";
    return 1;
  }
}
