// fusedops_app's subcommands. Each prints its results on stdout (logs go to stderr), as they
// are produced, and returns an exit status (app_error.h); errors it cannot report per model are
// thrown. info, check and bench print one JSON document instead with --json (app/README.md).
#pragma once

#include <CLI/CLI.hpp>
#include <c10/core/Device.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model_repository.h"

namespace fusedops_app {

// Bounds of the numeric options: beyond them a value is a typo or an attack, and libtorch
// would fail without naming the option (or allocate until the machine stops).
inline constexpr int64_t kMaxBatchSize = int64_t{1} << 24;
inline constexpr int64_t kMaxIterations = 10'000'000;
inline constexpr int64_t kMaxTensorFileMib = int64_t{1} << 20;  // 1 TiB
// Seeds are int64 wherever they are written down (fusedops.json, scripted/export.py's --seed);
// CLI11 reads "-1" for an unsigned option as 2^64 - 1.
inline constexpr uint64_t kMaxSeed = uint64_t{INT64_MAX};

// Options every subcommand takes (main.cpp), as the commands need them.
struct FileOptions {
  LoadOptions load;
  std::uintmax_t max_tensor_file_bytes = kDefaultMaxTensorFileBytes;
};

struct InfoOptions {
  std::string model;
  bool json = false;  // --json: one JSON document on stdout instead of the text
};

struct RunOptions {
  std::string model;
  std::string input;       // empty: a torch.rand input of the exported shape
  std::string output;      // empty: print only
  bool force = false;      // replace an existing output file
  int64_t batch_size = 0;  // 0: the exported batch
  uint64_t seed = 0;
  int64_t first_values = 8;
};

struct CheckOptions {
  std::string target;
  std::optional<double> atol;
  std::optional<double> rtol;
  bool json = false;
};

struct BenchOptions {
  std::string model;
  std::vector<int64_t> batch_sizes{1, 32, 1024};  // --batch, checked as text
  int64_t iterations = 100;
  int64_t warmup = 10;
  uint64_t seed = 0;
  bool json = false;
  bool cuda_graphs = false;  // --cuda-graphs: each call a replay (graphed_forward.h)
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
  // --instance-devices: instance t runs on entry t mod size (a server's instance_group over
  // several GPUs); empty: every instance on --device.
  std::vector<std::string> instance_devices;
  bool cuda_graphs = false;  // --cuda-graphs: each instance replays its own graphs
};

// Each add_* registers the subcommand and its options on app; run_* runs it.
CLI::App* add_info_command(CLI::App& app, InfoOptions& options);
CLI::App* add_run_command(CLI::App& app, RunOptions& options);
CLI::App* add_check_command(CLI::App& app, CheckOptions& options);
CLI::App* add_bench_command(CLI::App& app, BenchOptions& options);
CLI::App* add_stress_command(CLI::App& app, StressOptions& options);

int run_info_command(const InfoOptions& options, const c10::Device& device,
                     const FileOptions& files);
int run_run_command(const RunOptions& options, const c10::Device& device,
                    const FileOptions& files);
int run_check_command(const CheckOptions& options, const c10::Device& device,
                      const FileOptions& files);
int run_bench_command(const BenchOptions& options, const c10::Device& device,
                      const FileOptions& files);
int run_stress_command(const StressOptions& options, const c10::Device& device,
                       const FileOptions& files);

}  // namespace fusedops_app
