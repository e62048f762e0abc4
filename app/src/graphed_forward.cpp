#include "graphed_forward.h"

#include "app_error.h"
#include "exported_model.h"

#ifdef FUSEDOPS_APP_WITH_CUDA
// Streams, events and the device guard through c10's device-generic interfaces: they reach the
// CUDA runtime through libc10_cuda, which the app links; the CUDA runtime itself it does not
// (cmake/torch_runtime_links.cmake), so nothing here calls it inline.
#include <ATen/cuda/CUDAGraph.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <mutex>
#endif

namespace fusedops_app {

void check_cuda_graphs_device(const c10::Device& device, const std::string& option) {
  if (!device.is_cuda()) {
    throw UsageError("--cuda-graphs needs a GPU (CUDA graphs replay GPU work), but " + option +
                     " is " + device.str() + ": use cuda or cuda:N");
  }
}

#ifdef FUSEDOPS_APP_WITH_CUDA

namespace {

// Eager calls before a capture: the first makes the model's folds (weights the operators
// prepare once and cache), which a capture must find made; the second runs as the graph will.
constexpr int kWarmupCalls = 2;

// One capture at a time in the process: a capture begins by synchronizing with the allocator's
// pools, and two at once on one device have raced there in PyTorch (the same lock as
// fusedops.CudaGraphs').
std::mutex& capture_mutex() {
  static std::mutex mutex;
  return mutex;
}

}  // namespace

struct GraphedForward::Capture {
  at::cuda::CUDAGraph graph;
  at::Tensor input;   // the replay's input: each call copies x here
  at::Tensor output;  // the replay's output, written in place by every replay
};

GraphedForward::GraphedForward(ExportedModel& model) : model_(model) {
  check_cuda_graphs_device(model.device(), "the model's device");
}

at::Tensor GraphedForward::forward(const at::Tensor& x) {
  model_.check_input(x);
  const c10::Device& device = model_.device();
  const c10::DeviceGuard device_guard(device);
  const std::vector<int64_t> key = x.sizes().vec();
  auto found = captures_.find(key);
  if (found == captures_.end()) {
    auto capture = std::make_unique<Capture>();
    capture->input = x.to(device, /*non_blocking=*/false, /*copy=*/true);
    const c10::impl::VirtualGuardImpl cuda(c10::DeviceType::CUDA);
    const c10::Stream caller = cuda.getStream(device);
    // A capture cannot run on a device's default stream; a side stream that waits for the
    // caller's work (the input's copy) and that the caller then waits for.
    const c10::Stream side = cuda.getStreamFromGlobalPool(device);
    {
      const std::lock_guard<std::mutex> lock(capture_mutex());
      c10::Event input_ready(c10::DeviceType::CUDA);
      input_ready.record(caller);
      input_ready.block(side);
      const c10::StreamGuard on_side(side);
      for (int i = 0; i < kWarmupCalls; ++i) model_.forward(capture->input);
      // Thread-local mode: other threads' eager calls (a server's other instances) may go on
      // allocating while this one captures.
      capture->graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
      try {
        capture->output = model_.forward(capture->input);
      } catch (...) {
        try {
          capture->graph.capture_end();
        } catch (...) {
          // The capture is broken already; the model's own error is the one to report.
        }
        throw;
      }
      capture->graph.capture_end();
      c10::Event captured(c10::DeviceType::CUDA);
      captured.record(side);
      captured.block(caller);
    }
    found = captures_.emplace(key, std::move(capture)).first;
  }
  Capture& capture = *found->second;
  capture.input.copy_(x);
  capture.graph.replay();  // on the current stream
  return capture.output;
}

#else  // a fusedops_app built without CUDA

struct GraphedForward::Capture {};

GraphedForward::GraphedForward(ExportedModel& model) : model_(model) {
  throw UsageError("--cuda-graphs: this fusedops_app was built without CUDA (FUSEDOPS_WITH_CUDA "
                   "off, or no CUDA toolkit found): CUDA graphs need a CUDA build");
}

at::Tensor GraphedForward::forward(const at::Tensor& x) { return model_.forward(x); }

#endif

GraphedForward::~GraphedForward() = default;

size_t GraphedForward::captured() const { return captures_.size(); }

}  // namespace fusedops_app
