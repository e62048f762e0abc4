// `fusedops_app bench MODEL.pt --batch 1,32,1024 --iters N`: per-call latency percentiles and
// throughput, each call timed on its own and synchronized with the device.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "app_error.h"
#include "commands.h"
#include "device.h"
#include "exported_model.h"
#include "tensor_io.h"

namespace fusedops_app {

namespace {

// Nearest-rank percentile of sorted samples.
double percentile(const std::vector<double>& sorted, double p) {
  const auto rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

std::vector<double> time_forward_ms(ExportedModel& model, const at::Tensor& input,
                                    const BenchOptions& options) {
  const c10::Device& device = model.device();
  for (int64_t i = 0; i < options.warmup; ++i) {
    model.forward(input);
  }
  synchronize(device);
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(options.iterations));
  for (int64_t i = 0; i < options.iterations; ++i) {
    const auto start = std::chrono::steady_clock::now();
    model.forward(input);
    synchronize(device);
    samples.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  return samples;
}

}  // namespace

CLI::App* add_bench_command(CLI::App& app, BenchOptions& options) {
  CLI::App* command = app.add_subcommand(
      "bench", "Latency percentiles and throughput of a model at several batch sizes");
  command->add_option("model", options.model,
                      "model.pt or model.pt2 written by scripted/export.py")
      ->required();
  command->add_option("-b,--batch", options.batch_sizes, "comma list of batch sizes")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, kMaxBatchSize))
      ->capture_default_str();
  command->add_option("-n,--iters", options.iterations, "timed calls per batch size")
      ->check(CLI::Range(int64_t{1}, kMaxIterations))
      ->capture_default_str();
  command->add_option("--warmup", options.warmup, "untimed calls before timing")
      ->check(CLI::Range(int64_t{0}, kMaxIterations))
      ->capture_default_str();
  command->add_option("--seed", options.seed, "seed of the random inputs")->capture_default_str();
  return command;
}

int run_bench_command(const BenchOptions& options, const c10::Device& device,
                      const FileOptions& files) {
  ExportedModel model = ExportedModel::load(options.model, device, files.load);
  fmt::print("model {} on {}, {} timed calls after {} warm-up calls per batch size\n",
             model.display_name(), device.str(), options.iterations, options.warmup);
  fmt::print("{:>7} {:>11} {:>11} {:>11} {:>11} {:>15}\n", "batch", "p50 ms", "p90 ms",
             "p99 ms", "mean ms", "samples/s");
  for (const int64_t batch : options.batch_sizes) {
    const at::Tensor input = model.random_input(batch, options.seed);
    spdlog::debug("bench {}: input {}", model.display_name(), shape_text(input.sizes()));
    std::vector<double> samples = time_forward_ms(model, input, options);
    std::sort(samples.begin(), samples.end());
    const double mean_ms =
        std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(samples.size());
    fmt::print("{:>7} {:>11.4f} {:>11.4f} {:>11.4f} {:>11.4f} {:>15.1f}\n", batch,
               percentile(samples, 50), percentile(samples, 90), percentile(samples, 99),
               mean_ms, static_cast<double>(batch) * 1e3 / mean_ms);
    std::fflush(stdout);
  }
  return kExitOk;
}

}  // namespace fusedops_app
