// `fusedops_app bench MODEL.pt --batch 1,32,1024 --iters N [--cuda-graphs]`: per-call latency
// statistics and throughput, each call timed on its own and synchronized with the device; with
// --cuda-graphs each call copies its input into a captured graph and replays it
// (graphed_forward.h).
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/version.h>

#include <chrono>
#include <cstdio>
#include <optional>

#include "app_error.h"
#include "commands.h"
#include "device.h"
#include "exported_model.h"
#include "fusedops/fusedops.h"
#include "graphed_forward.h"
#include "json_output.h"
#include "latency_statistics.h"
#include "printable.h"
#include "tensor_io.h"

namespace fusedops_app {

namespace {

// `graphed`: the model's graphs under --cuda-graphs (captured by an untimed first call, before
// the warm-up calls), else null.
std::vector<double> time_forward_ms(ExportedModel& model, GraphedForward* graphed,
                                    const at::Tensor& input, const BenchOptions& options) {
  const c10::Device& device = model.device();
  auto call = [&] { return graphed ? graphed->forward(input) : model.forward(input); };
  if (graphed) call();
  for (int64_t i = 0; i < options.warmup; ++i) {
    call();
  }
  synchronize(device);
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(options.iterations));
  for (int64_t i = 0; i < options.iterations; ++i) {
    const auto start = std::chrono::steady_clock::now();
    call();
    synchronize(device);
    samples.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  return samples;
}

// The --batch list is checked as text, whole: CLI11 splits a delimited option itself and drops
// empty entries ("1,,2" became [1, 2]), and its Range on a value that is not a number ("1 32")
// reports the range of a double, which names neither the form expected nor the value given.
std::string check_batch_sizes(const std::string& text) {
  const std::vector<std::string> entries = CLI::detail::split(text, ',');
  bool valid = !text.empty() && text.back() != ',';
  for (const std::string& entry : entries) {
    int64_t value = 0;
    valid = valid && CLI::detail::lexical_cast(entry, value) && value >= 1 &&
            value <= kMaxBatchSize;
  }
  if (valid) {
    return {};
  }
  return fmt::format("expected batch sizes from 1 to {} separated by commas (e.g. 1,32,1024), "
                     "got '{}'",
                     kMaxBatchSize, printable(text));
}

// The batch sizes of a list check_batch_sizes accepted.
std::vector<int64_t> batch_sizes_of(const std::string& text) {
  std::vector<int64_t> sizes;
  for (const std::string& entry : CLI::detail::split(text, ',')) {
    int64_t value = 0;
    CLI::detail::lexical_cast(entry, value);
    sizes.push_back(value);
  }
  return sizes;
}

double samples_per_second(int64_t batch, double ms) {
  return ms > 0.0 ? static_cast<double>(batch) * 1e3 / ms : 0.0;
}

JsonDocument summary_json(int64_t batch, const LatencySummary& s) {
  return {{"batch", batch},
          {"samples", s.samples},
          {"min_ms", s.min_ms},
          {"median_ms", s.median_ms},
          {"p90_ms", s.p90_ms},
          {"p99_ms", s.p99_ms ? JsonDocument(*s.p99_ms) : JsonDocument(nullptr)},
          {"q1_ms", s.q1_ms},
          {"q3_ms", s.q3_ms},
          {"iqr_ms", s.iqr_ms},
          {"max_ms", s.max_ms},
          {"mean_ms", s.mean_ms},
          {"samples_per_s", samples_per_second(batch, s.median_ms)},
          {"relative_iqr", s.relative_iqr()},
          {"unstable", s.unstable()}};
}

}  // namespace

CLI::App* add_bench_command(CLI::App& app, BenchOptions& options) {
  CLI::App* command = app.add_subcommand(
      "bench", "Latency statistics (min, median, p90, p99, IQR) and throughput of a model at "
               "several batch sizes");
  command->add_option("model", options.model,
                      "model.pt or model.pt2 written by scripted/export.py")
      ->required();
  command
      ->add_option_function<std::string>(
          "-b,--batch",
          [&options](const std::string& text) { options.batch_sizes = batch_sizes_of(text); },
          "comma list of batch sizes")
      ->check(CLI::Validator(check_batch_sizes, "INT,..."))
      ->default_str("1,32,1024");
  command->add_option("-n,--iters", options.iterations,
                      fmt::format("timed calls per batch size (p99 is reported from {} on)",
                                  kMinSamplesForP99))
      ->check(CLI::Range(int64_t{1}, kMaxIterations))
      ->capture_default_str();
  command->add_option("--warmup", options.warmup, "untimed calls before timing")
      ->check(CLI::Range(int64_t{0}, kMaxIterations))
      ->capture_default_str();
  command->add_option("--seed", options.seed, "seed of the random inputs")
      ->check(CLI::Range(uint64_t{0}, kMaxSeed))
      ->capture_default_str();
  command->add_flag("--json", options.json,
                    "one JSON document on stdout at the end instead of the table "
                    "(app/README.md); the table's rows go to stderr as they are measured");
  command->add_flag("--cuda-graphs", options.cuda_graphs,
                    "capture each batch size's call into a CUDA graph (an untimed call before "
                    "the warm-up) and time replays: input copy, replay, synchronize (GPU only)");
  return command;
}

int run_bench_command(const BenchOptions& options, const c10::Device& device,
                      const FileOptions& files) {
  if (options.cuda_graphs) check_cuda_graphs_device(device, "--device");
  ExportedModel model = ExportedModel::load(options.model, device, files.load);
  std::optional<GraphedForward> graphed;
  if (options.cuda_graphs) graphed.emplace(model);
  // With --json, stdout carries the document alone and the table goes to the log, row by row.
  std::FILE* table = options.json ? stderr : stdout;
  fmt::print(table, "model {} on {}, {} timed calls after {} warm-up calls per batch size{}\n",
             model.display_name(), device.str(), options.iterations, options.warmup,
             options.cuda_graphs ? ", each a CUDA graph replay" : "");
  fmt::print(table, "{:>7} {:>11} {:>11} {:>11} {:>11} {:>11} {:>13}\n", "batch", "min ms",
             "median ms", "p90 ms", "p99 ms", "IQR ms", "samples/s");
  std::fflush(table);

  JsonDocument results = JsonDocument::array();
  for (const int64_t batch : options.batch_sizes) {
    const at::Tensor input = model.random_input(batch, options.seed);
    spdlog::debug("bench {}: input {}", model.display_name(), shape_text(input.sizes()));
    const LatencySummary s = summarize_latencies(
        time_forward_ms(model, graphed ? &*graphed : nullptr, input, options));
    fmt::print(table, "{:>7} {:>11.4f} {:>11.4f} {:>11.4f} {:>11} {:>11.4f} {:>13.1f}\n", batch,
               s.min_ms, s.median_ms, s.p90_ms,
               s.p99_ms ? fmt::format("{:.4f}", *s.p99_ms) : std::string("-"), s.iqr_ms,
               samples_per_second(batch, s.median_ms));
    std::fflush(table);
    if (s.unstable()) {
      spdlog::warn("batch {}: the interquartile range is {:.0f}% of the median (more than "
                   "{:.0f}%): these timings are unstable; other load on the machine, or too few "
                   "--warmup or --iters calls",
                   batch, 100.0 * s.relative_iqr(), 100.0 * kUnstableRelativeIqr);
    }
    results.push_back(summary_json(batch, s));
  }
  if (options.iterations < kMinSamplesForP99) {
    spdlog::info("p99 is reported from --iters {} on", kMinSamplesForP99);
  }
  if (options.json) {
    print_json({{"command", "bench"},
                {"fusedops_version", fusedops::version()},
                {"libtorch_version", TORCH_VERSION},
                {"model", model.display_name()},
                {"file", model.path().string()},
                {"device", device.str()},
                {"iterations", options.iterations},
                {"warmup", options.warmup},
                {"cuda_graphs", options.cuda_graphs},
                {"seed", options.seed},
                {"min_samples_for_p99", kMinSamplesForP99},
                {"unstable_relative_iqr", kUnstableRelativeIqr},
                {"results", results}});
  }
  return kExitOk;
}

}  // namespace fusedops_app
