// fusedops_app's subcommands. Each prints its results on stdout (logs go to stderr) and
// returns an exit status (app_error.h); errors it cannot report per model are thrown.
#pragma once

#include <CLI/CLI.hpp>
#include <c10/core/Device.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fusedops_app {

struct InfoOptions {
  std::string model;
};

struct RunOptions {
  std::string model;
  std::string input;       // empty: a torch.rand input of the exported shape
  std::string output;      // empty: print only
  int64_t batch_size = 0;  // 0: the exported batch
  uint64_t seed = 0;
  int64_t first_values = 8;
};

struct CheckOptions {
  std::string target;
  std::optional<double> atol;
  std::optional<double> rtol;
};

struct BenchOptions {
  std::string model;
  std::vector<int64_t> batch_sizes{1, 32, 1024};
  int64_t iterations = 100;
  int64_t warmup = 10;
  uint64_t seed = 0;
};

struct StressOptions {
  std::string model;
  int threads = 4;               // --instances: serving threads, a CUDA stream each
  int64_t calls = 10000;         // in all, per weight mode
  int64_t batch_size = 8;
  std::string weights = "both";  // shared, copies or both
  bool inference_mode = true;    // load under c10::InferenceMode, as Triton does by default
  bool fold_cache = true;        // false: the model's cache_folds = false
  int unload_cycles = 3;
  uint64_t seed = 0;
};

// Each add_* registers the subcommand and its options on app; run_* runs it.
CLI::App* add_info_command(CLI::App& app, InfoOptions& options);
CLI::App* add_run_command(CLI::App& app, RunOptions& options);
CLI::App* add_check_command(CLI::App& app, CheckOptions& options);
CLI::App* add_bench_command(CLI::App& app, BenchOptions& options);
CLI::App* add_stress_command(CLI::App& app, StressOptions& options);

int run_info_command(const InfoOptions& options, const c10::Device& device);
int run_run_command(const RunOptions& options, const c10::Device& device);
int run_check_command(const CheckOptions& options, const c10::Device& device);
int run_bench_command(const BenchOptions& options, const c10::Device& device);
int run_stress_command(const StressOptions& options, const c10::Device& device);

}  // namespace fusedops_app
