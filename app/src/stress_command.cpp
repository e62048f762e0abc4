// `fusedops_app stress MODEL`: the model served the way an inference server serves it, and every
// answer checked. Triton's PyTorch backend (and in-house libtorch servers) load the model under
// c10::InferenceMode, run several instances on threads of their own, each with its own CUDA
// stream, either on one shared module (ENABLE_WEIGHT_SHARING) or on a copy each, and load and
// unload models while running. Each output is compared with the answer of the same input run on
// one thread beforehand; then a load/unload loop shows that unloading returns the GPU memory.
// With --cuda-graphs each instance captures its calls into CUDA graphs of its own (on its own
// stream, graphed_forward.h) and replays them, checked the same way.
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <optional>
#include <thread>

#include "app_error.h"
#include "commands.h"
#include "device.h"
#include "exported_model.h"
#include "fusedops/fusedops.h"
#include "graphed_forward.h"
#include "tensor_io.h"

namespace fusedops_app {

namespace {

// The most threads `stress` starts: enough for any server instance count we would test, small
// enough that a typo cannot start thousands of streams.
constexpr int kMaxStressThreads = 256;
// Distinct inputs the calls cycle through (each checked against its single-thread answer).
constexpr int64_t kDistinctInputs = 16;
// How close "back to the baseline" must be after an unload.
constexpr int64_t kMemoryToleranceBytes = int64_t{1} << 20;

double percentile(std::vector<double> samples, double p) {
  std::sort(samples.begin(), samples.end());
  const auto rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(samples.size())));
  return samples[std::clamp<size_t>(rank, 1, samples.size()) - 1];
}

int64_t allocated_bytes(const c10::Device& device) {
  if (!device.is_cuda()) return 0;
  synchronize(device);
  const auto stats = c10::getDeviceAllocator(c10::kCUDA)->getDeviceStats(device.index());
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
      .current;
}

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// Loads the model as a server would: under InferenceMode (its weights become inference tensors)
// when asked, with the fold cache on or off.
ExportedModel load_for_serving(const StressOptions& options, const c10::Device& device,
                               const FileOptions& files) {
  std::optional<c10::InferenceMode> inference;
  if (options.inference_mode) inference.emplace();
  ExportedModel model = ExportedModel::load(options.model, device, files.load);
  if (!options.fold_cache) model.disable_fold_cache();
  return model;
}

struct Outcome {
  int64_t calls = 0;
  int64_t mismatches = 0;
  double max_abs_error = 0.0;
  std::vector<double> latencies_ms;
  std::string first_mismatch;
};

// One configuration: `threads` threads, each on its own stream, on `models` (one shared, or one
// each), `calls` calls in all.
Outcome serve(std::vector<ExportedModel>& models, const std::vector<size_t>& model_of_thread,
              const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& expected,
              const StressOptions& options, const std::vector<c10::Device>& device_of_thread) {
  const int threads = options.threads;  // --instances
  std::vector<Outcome> per_thread(static_cast<size_t>(threads));
  std::vector<std::string> errors(static_cast<size_t>(threads));
  std::atomic<int> ready{0};
  auto body = [&](int t) {
    Outcome& out = per_thread[static_cast<size_t>(t)];
    try {
      const c10::Device& device = device_of_thread[static_cast<size_t>(t)];
      std::optional<c10::StreamGuard> stream_guard;
      if (device.is_cuda()) {
        const c10::impl::VirtualGuardImpl guard_impl(device.type());
        stream_guard.emplace(guard_impl.getStreamFromGlobalPool(device));
      }
      ExportedModel& model = models[model_of_thread[static_cast<size_t>(t)]];
      std::optional<GraphedForward> graphed;
      if (options.cuda_graphs) graphed.emplace(model);
      std::vector<at::Tensor> local_inputs;
      for (const at::Tensor& x : inputs) local_inputs.push_back(x.to(device));
      const int64_t share = options.calls / threads + (t < options.calls % threads ? 1 : 0);
      out.latencies_ms.reserve(static_cast<size_t>(share));
      // A graph's capture is a server's warm-up: before the timed calls.
      if (graphed) graphed->forward(local_inputs[0]);
      // Start together, so that first calls race as they do when a server starts.
      ready.fetch_add(1);
      while (ready.load() < threads) std::this_thread::yield();
      for (int64_t i = 0; i < share; ++i) {
        const size_t which = static_cast<size_t>((t + i * threads) % kDistinctInputs);
        const auto start = std::chrono::steady_clock::now();
        // .cpu() waits for this thread's stream only, as a server's response copy does (and
        // copies a graph's output before this thread's next replay writes it).
        const at::Tensor& x = local_inputs[which];
        const at::Tensor result = (graphed ? graphed->forward(x) : model.forward(x)).cpu();
        out.latencies_ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count());
        ++out.calls;
        // Bitwise equal is the common case and cheap to check; anything else goes through the
        // tolerance rule (another stream may get another cuBLAS workspace, hence another
        // summation order).
        if (at::equal(result, expected[which])) continue;
        const Comparison c = compare_to_reference(result, expected[which],
                                                  tolerance_for(expected[which].scalar_type()));
        out.max_abs_error = std::max(out.max_abs_error, c.max_abs_error);
        if (!c.passed()) {
          if (out.mismatches++ == 0) {
            out.first_mismatch = fmt::format("thread {} call {} (input {}): {}", t, i, which,
                                             c.describe(tolerance_for(expected[which].scalar_type())));
          }
        }
      }
    } catch (const std::exception& e) {
      errors[static_cast<size_t>(t)] = torch_error_message(e);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(body, t);
  for (auto& thread : pool) thread.join();
  for (int t = 0; t < threads; ++t) {
    if (!errors[static_cast<size_t>(t)].empty()) {
      throw std::runtime_error(
          fmt::format("stress thread {}: {}", t, errors[static_cast<size_t>(t)]));
    }
  }
  Outcome total;
  for (Outcome& o : per_thread) {
    total.calls += o.calls;
    total.mismatches += o.mismatches;
    total.max_abs_error = std::max(total.max_abs_error, o.max_abs_error);
    total.latencies_ms.insert(total.latencies_ms.end(), o.latencies_ms.begin(),
                              o.latencies_ms.end());
    if (total.first_mismatch.empty()) total.first_mismatch = o.first_mismatch;
  }
  return total;
}

}  // namespace

CLI::App* add_stress_command(CLI::App& app, StressOptions& options) {
  CLI::App* command = app.add_subcommand(
      "stress", "Serve a model from several threads, each with its own CUDA stream, as an "
                "inference server does; check every output against the single-thread answer; "
                "then load and unload it and report the GPU memory after each unload");
  command->add_option("model", options.model, "an eval-mode model.pt or model.pt2")->required();
  command->add_option("--instances", options.threads,
                      "serving threads (a server's model instances), each with its own CUDA "
                      "stream")
      ->check(CLI::Range(1, kMaxStressThreads))
      ->capture_default_str();
  command->add_option("--calls", options.calls, "calls in all, per weight mode")
      ->check(CLI::Range(int64_t{1}, int64_t{100'000'000}))
      ->capture_default_str();
  command->add_option("-b,--batch", options.batch_size, "batch of each call")
      ->check(CLI::Range(int64_t{1}, int64_t{1'000'000}))
      ->capture_default_str();
  command->add_option("--weights", options.weights,
                      "shared: one loaded module for all threads (Triton's weight sharing); "
                      "copies: one per thread; both")
      ->check(CLI::IsMember({"shared", "copies", "both"}))
      ->capture_default_str();
  command->add_flag("!--no-inference-mode", options.inference_mode,
                    "load without c10::InferenceMode (Triton's INFERENCE_MODE false)");
  command->add_flag("!--no-fold-cache", options.fold_cache,
                    "run the model with cache_folds = false (every call folds its weights)");
  command->add_option("--unload-cycles", options.unload_cycles,
                      "load / run / unload cycles after the serving runs")
      ->check(CLI::Range(0, 10'000))
      ->capture_default_str();
  command->add_option("--seed", options.seed, "seed of the inputs")
      ->check(CLI::Range(uint64_t{0}, kMaxSeed))
      ->capture_default_str();
  // Taken as text and split here, empty entries kept: CLI11's own delimiter drops them
  // ("cpu,,cpu" ran as two instances' worth of cpu), and run_stress_command refuses them.
  command->add_option_function<std::string>(
      "--instance-devices",
      [&options](const std::string& text) {
        options.instance_devices = CLI::detail::split(text, ',');
        if (text.empty() || text.back() == ',') options.instance_devices.emplace_back();
      },
      "the devices of the instances, in turn (instance t on entry t mod count, e.g. "
      "cuda:0,cuda:1 as Triton's instance_group gpus: [0, 1]); every entry is checked; the "
      "single-thread answers come from --device");
  command->add_flag("--cuda-graphs", options.cuda_graphs,
                    "each instance captures its calls into CUDA graphs on its own stream (at "
                    "each input's first call) and replays them (GPU only)");
  return command;
}

int run_stress_command(const StressOptions& options, const c10::Device& device,
                       const FileOptions& files) {
  // Every entry of --instance-devices, before anything is loaded: one that no instance would
  // use is still a mistake in the command line.
  std::vector<c10::Device> listed;
  for (const std::string& entry : options.instance_devices) {
    listed.push_back(parse_device(entry, "--instance-devices"));
    if (options.cuda_graphs) check_cuda_graphs_device(listed.back(), "--instance-devices");
  }
  if (options.cuda_graphs && options.instance_devices.empty()) {
    check_cuda_graphs_device(device, "--device");
  }
  // The single-thread answers, from a model loaded on its own.
  std::vector<at::Tensor> inputs, expected;
  {
    ExportedModel reference = load_for_serving(options, device, files);
    if (reference.metadata() && reference.metadata()->mode == "train") {
      throw UsageError(fmt::format(
          "{} was exported in train mode: each call updates its BatchNorm statistics, so "
          "concurrent calls cannot match a single-thread answer; stress an eval-mode export",
          options.model));
    }
    for (int64_t i = 0; i < kDistinctInputs; ++i) {
      inputs.push_back(reference.random_input(options.batch_size, options.seed + i).cpu());
      expected.push_back(reference.forward(inputs.back()).cpu());
    }
    fmt::print("stress {} on {}: batch {}, {} distinct inputs, InferenceMode {}, fold cache {}, "
               "CUDA graphs {}\n",
               reference.display_name(), device.str(), options.batch_size, kDistinctInputs,
               options.inference_mode ? "on" : "off", options.fold_cache ? "on" : "off",
               options.cuda_graphs ? "on" : "off");
  }
  std::fflush(stdout);

  // The instances' devices, and the distinct ones in the order given.
  std::vector<c10::Device> device_of_thread, devices;
  for (int t = 0; t < options.threads; ++t) {
    device_of_thread.push_back(
        options.instance_devices.empty()
            ? device
            : listed[static_cast<size_t>(t) % listed.size()]);
    if (std::find(devices.begin(), devices.end(), device_of_thread.back()) == devices.end()) {
      devices.push_back(device_of_thread.back());
    }
  }
  if (!options.instance_devices.empty()) {
    std::string names;
    for (const c10::Device& d : devices) names += (names.empty() ? "" : ", ") + d.str();
    fmt::print("instances on {}\n", names);
  }

  bool failed = false;
  std::vector<std::string> modes;
  if (options.weights != "copies") modes.push_back("shared");
  if (options.weights != "shared") modes.push_back("copies");
  for (const std::string& mode : modes) {
    // Shared: one module a device, used by every instance there (Triton shares weights
    // between the instances of one GPU); copies: one module an instance.
    std::vector<ExportedModel> models;
    std::vector<size_t> model_of_thread;
    for (int t = 0; t < options.threads; ++t) {
      const c10::Device& d = device_of_thread[static_cast<size_t>(t)];
      if (mode == "shared") {
        const auto at = std::find(devices.begin(), devices.end(), d) - devices.begin();
        model_of_thread.push_back(static_cast<size_t>(at));
      } else {
        model_of_thread.push_back(static_cast<size_t>(t));
        models.push_back(load_for_serving(options, d, files));
      }
    }
    if (mode == "shared") {
      for (const c10::Device& d : devices) models.push_back(load_for_serving(options, d, files));
    }
    const auto start = std::chrono::steady_clock::now();
    const Outcome outcome = serve(models, model_of_thread, inputs, expected, options,
                                  device_of_thread);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print("{:>6} weights, {} threads: {} calls in {:.2f} s, {:.0f} calls/s, latency p50 "
               "{:.3f} ms p99 {:.3f} ms, mismatches {} (max |diff| {:.3g})\n",
               mode, options.threads, outcome.calls, seconds,
               static_cast<double>(outcome.calls) / seconds, percentile(outcome.latencies_ms, 50),
               percentile(outcome.latencies_ms, 99), outcome.mismatches, outcome.max_abs_error);
    if (outcome.mismatches > 0) {
      fmt::print("  first mismatch: {}\n", outcome.first_mismatch);
      failed = true;
    }
    std::fflush(stdout);
  }

  if (options.unload_cycles > 0) {
    // Each instance device in turn. On a GPU, the caching allocator's allocated bytes; on the
    // CPU (no such count), the fold cache's own bytes stand for what a model leaves behind.
    for (const c10::Device& d : devices) {
      // A first cycle, not counted: the calls of this thread's stream on d make libraries
      // keep state of their own (cuBLAS's workspace for this stream: 32 MiB on an H200), held
      // for the process by design, as on the --device, where the single-thread answers were
      // computed. What a model leaves behind shows in the cycles after it.
      {
        ExportedModel model = load_for_serving(options, d, files);
        for (int64_t i = 0; i < 3; ++i) model.forward(inputs[static_cast<size_t>(i)].to(d));
      }
      const int64_t baseline = allocated_bytes(d);
      const fusedops::FoldCacheStats folds_before = fusedops::fold_cache_stats();
      fmt::print("load/unload: baseline {} on {}, fold cache {} entries / {} bytes\n",
                 d.is_cuda() ? fmt::format("{:.2f} MiB allocated", mib(baseline))
                             : std::string("(no GPU memory)"),
                 d.str(), folds_before.entries, folds_before.bytes);
      for (int cycle = 1; cycle <= options.unload_cycles; ++cycle) {
        int64_t loaded = 0;
        {
          ExportedModel model = load_for_serving(options, d, files);
          for (int64_t i = 0; i < 3; ++i) model.forward(inputs[static_cast<size_t>(i)].to(d));
          loaded = allocated_bytes(d);
        }
        const int64_t after = allocated_bytes(d);
        const fusedops::FoldCacheStats folds = fusedops::fold_cache_stats();
        const bool back = std::llabs(after - baseline) <= kMemoryToleranceBytes &&
                          folds.bytes == folds_before.bytes;
        const std::string memory =
            d.is_cuda() ? fmt::format("{:.2f} MiB while loaded, {:.2f} MiB after unload "
                                      "({:+.3f} MiB vs baseline), ",
                                      mib(loaded), mib(after), mib(after - baseline))
                        : std::string();
        fmt::print("  cycle {}: {}fold cache {} entries / {} bytes after unload: {}\n", cycle,
                   memory, folds.entries, folds.bytes, back ? "back to baseline" : "NOT back");
        std::fflush(stdout);
        failed = failed || !back;
      }
    }
  }
  return failed ? kExitModelFailed : kExitOk;
}

}  // namespace fusedops_app
