// fusedops_app: loads the models scripted/export.py writes (TorchScript model.pt, AOTInductor
// model.pt2) and inspects, runs, checks and benchmarks them with libtorch and libfusedops only
// (no Python).
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include "app_error.h"
#include "commands.h"
#include "device.h"
#include "fusedops/fusedops.h"

namespace {

using namespace fusedops_app;

struct GlobalOptions {
  std::string device = "cpu";
  int threads = 0;     // 0: libtorch's default
  int verbosity = 0;   // -v: debug, -vv: trace
  bool quiet = false;  // warnings and errors only
};

void configure_logging(const GlobalOptions& options) {
  // Logs on stderr, so that stdout carries only the results.
  auto logger = spdlog::stderr_color_mt("fusedops_app");
  logger->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  spdlog::set_default_logger(logger);
  spdlog::level::level_enum level = spdlog::level::info;
  if (options.quiet) {
    level = spdlog::level::warn;
  } else if (options.verbosity == 1) {
    level = spdlog::level::debug;
  } else if (options.verbosity >= 2) {
    level = spdlog::level::trace;
  }
  spdlog::set_level(level);
}

void add_global_options(CLI::App& app, GlobalOptions& options) {
  app.add_option("-d,--device", options.device, "cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("-t,--threads", options.threads,
                 "CPU threads for libtorch's intra-op pool (default: libtorch's choice)")
      ->check(CLI::PositiveNumber);
  app.add_flag("-v,--verbose", options.verbosity, "more logs on stderr (-vv: trace)");
  app.add_flag("-q,--quiet", options.quiet, "only warnings and errors on stderr");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fusedops_app: inspect, run, check and benchmark exported fusedops models "
               "(scripted/export.py) with libtorch, no Python"};
  app.footer("Exit status: 0 success; 1 a model failed while running or did not match its "
             "reference; 2 bad arguments, missing or corrupt file, wrong input, missing "
             "operator or device.");
  // Global options may also follow the subcommand: `fusedops_app check repo --device cuda`.
  app.fallthrough();
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("fusedops_app ") + fusedops::version() +
                                        " (libtorch " TORCH_VERSION ")");

  GlobalOptions global;
  add_global_options(app, global);
  InfoOptions info_options;
  RunOptions run_options;
  CheckOptions check_options;
  BenchOptions bench_options;
  CLI::App* info = add_info_command(app, info_options);
  CLI::App* run = add_run_command(app, run_options);
  CLI::App* check = add_check_command(app, check_options);
  CLI::App* bench = add_bench_command(app, bench_options);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int status = app.exit(e);  // prints --help, or the parse error and a usage hint
    return status == 0 ? kExitOk : kExitUsage;
  }
  configure_logging(global);

  try {
    // Calling into libfusedops keeps it a needed library of this executable (it is also
    // linked with --no-as-needed): its TORCH_LIBRARY registrations run before any model
    // loads, so "Unknown builtin op: fusedops::..." cannot happen here.
    spdlog::info("fusedops {} (libfusedops), libtorch {}, {} CUDA GPU(s)", fusedops::version(),
                 TORCH_VERSION, torch::cuda::device_count());
    if (global.threads > 0) {
      at::set_num_threads(global.threads);
    }
    spdlog::debug("libtorch CPU threads: {}", at::get_num_threads());
    const c10::Device device = parse_device(global.device);

    if (info->parsed()) {
      return run_info_command(info_options, device);
    }
    if (run->parsed()) {
      return run_run_command(run_options, device);
    }
    if (check->parsed()) {
      return run_check_command(check_options, device);
    }
    if (bench->parsed()) {
      return run_bench_command(bench_options, device);
    }
    return kExitUsage;  // unreachable: require_subcommand(1)
  } catch (const UsageError& e) {
    spdlog::error("{}", e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    // c10::Error from a forward (an operator's TORCH_CHECK), or anything else unforeseen.
    spdlog::error("{}", torch_error_message(e));
    return kExitModelFailed;
  }
}
