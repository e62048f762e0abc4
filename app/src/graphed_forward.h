// `bench --cuda-graphs` and `stress --cuda-graphs` (issue 38): a model's forward captured into
// a CUDA graph once per input shape and replayed, for servers whose small-batch calls cost more
// host time than GPU time (a replay issues the whole call's kernels at once). The app's form of
// Python's fusedops.CudaGraphs (models/fusedops/cuda_graphs.py), with the same rules: warm-up
// calls on a side stream before each capture make the folds the graph reads (the fold cache
// keeps none made during a capture), captures are serialized process-wide and capture in
// thread-local mode (other threads go on running eagerly, as a server's other instances do),
// and a replay reads the weights of its capture: the app never changes a loaded model's
// weights.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace fusedops_app {

class ExportedModel;

// Before any model is loaded: --cuda-graphs on `device` (given by `option`, "--device" or
// "--instance-devices") is a GPU, or UsageError names the option, what it needs and the device.
void check_cuda_graphs_device(const c10::Device& device, const std::string& option);

class GraphedForward {
 public:
  // model must live as long as this object, on a CUDA device. Throws UsageError for a model on
  // the CPU and in a fusedops_app built without CUDA.
  explicit GraphedForward(ExportedModel& model);
  GraphedForward(const GraphedForward&) = delete;
  GraphedForward& operator=(const GraphedForward&) = delete;
  ~GraphedForward();

  // The model's output for x: x copied into the static input of x's shape (captured on the
  // first call of that shape on this object: two eager calls, then the capture), the graph
  // replayed on the current stream. The result is the graph's static output: valid until the
  // next call of this object with x's shape (clone it to keep it). Checked as
  // ExportedModel::forward checks (input before, output after the capture). One thread and
  // one stream per object: a server instance's.
  at::Tensor forward(const at::Tensor& x);

  // Graphs captured so far (one per input shape).
  size_t captured() const;

 private:
  struct Capture;
  ExportedModel& model_;
  std::map<std::vector<int64_t>, std::unique_ptr<Capture>> captures_;
};

}  // namespace fusedops_app
