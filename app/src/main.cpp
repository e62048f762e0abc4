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
#include "printable.h"

#include <algorithm>
#include <thread>

namespace {

using namespace fusedops_app;

struct GlobalOptions {
  std::string device = "cpu";
  int threads = 0;     // 0: libtorch's default
  int verbosity = 0;   // -v: debug, -vv: trace
  bool quiet = false;  // warnings and errors only
  bool allow_unverified = false;
  bool allow_external_symlinks = false;
  int64_t max_tensor_file_mib = static_cast<int64_t>(kDefaultMaxTensorFileBytes >> 20);
};

// More intra-op threads than CPUs never helps, and a huge count makes the thread pool hang.
int max_threads() {
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

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

// The group of the options every subcommand takes, in the main help and in each subcommand's.
constexpr const char* kGlobalOptionsGroup = "Global options (before or after the subcommand)";

// CLI11 lists a subcommand's own options only; the global ones are accepted after it too
// (fallthrough), so its --help lists them as well, from the parent's group.
class SubcommandHelpFormatter : public CLI::Formatter {
 public:
  std::string make_footer(const CLI::App* app) const override {
    const CLI::App* parent = app->get_parent();
    if (parent == nullptr) {
      return CLI::Formatter::make_footer(app);
    }
    const std::vector<const CLI::Option*> global = parent->get_options(
        [](const CLI::Option* option) { return option->get_group() == kGlobalOptionsGroup; });
    return make_group(kGlobalOptionsGroup, false, global) + CLI::Formatter::make_footer(app);
  }
};

void add_global_options(CLI::App& app, GlobalOptions& options) {
  app.option_defaults()->group(kGlobalOptionsGroup);
  app.add_option("-d,--device", options.device, "cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("-t,--threads", options.threads,
                 "CPU threads for libtorch's intra-op pool (default: libtorch's choice)")
      ->check(CLI::Range(1, max_threads()));
  app.add_flag("--allow-unverified", options.allow_unverified,
               "load a model whose folder has no fusedops_manifest.json (a hand-made .pt, an "
               "older export) with a warning; files a manifest lists are always verified");
  app.add_flag("--allow-external-symlinks", options.allow_external_symlinks,
               "follow symbolic links that lead out of the model folder (check: out of the "
               "repository)");
  app.add_option("--max-tensor-file-mib", options.max_tensor_file_mib,
                 "largest tensor file (sample input, reference, --input) read, in MiB")
      ->check(CLI::Range(int64_t{1}, kMaxTensorFileMib))
      ->capture_default_str();
  app.add_flag("-v,--verbose", options.verbosity, "more logs on stderr (-vv: trace)");
  app.add_flag("-q,--quiet", options.quiet, "only warnings and errors on stderr");
  app.option_defaults()->group("Options");  // the subcommands' own options
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fusedops_app: inspect, run, check and benchmark exported fusedops models "
               "(scripted/export.py) with libtorch, no Python"};
  app.footer("Exit status: 0 success; 1 a model failed while running or did not match its "
             "reference (check: any FAIL line); 2 bad arguments, a missing, damaged or "
             "unverified file, wrong input, missing operator or device (check: ERROR lines "
             "and no FAIL).");
  // Global options may also follow the subcommand: `fusedops_app check repo --device cuda`.
  app.fallthrough();
  app.require_subcommand(1);
  app.formatter(std::make_shared<SubcommandHelpFormatter>());  // before the subcommands copy it
  app.set_version_flag("--version", std::string("fusedops_app ") + fusedops::version() +
                                        " (libtorch " TORCH_VERSION ")");

  GlobalOptions global;
  add_global_options(app, global);
  InfoOptions info_options;
  RunOptions run_options;
  CheckOptions check_options;
  BenchOptions bench_options;
  StressOptions stress_options;
  CLI::App* info = add_info_command(app, info_options);
  CLI::App* run = add_run_command(app, run_options);
  CLI::App* check = add_check_command(app, check_options);
  CLI::App* bench = add_bench_command(app, bench_options);
  CLI::App* stress = add_stress_command(app, stress_options);

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
    // A bad FUSEDOPS_* setting (the library's settings table, ops/plan/settings.h) is a
    // mistake in how the app was started: said before any model is read, exit 2.
    try {
      fusedops::reload_settings();
    } catch (const c10::Error& e) {
      throw UsageError(torch_error_message(e));
    }
    if (global.threads > 0) {
      at::set_num_threads(global.threads);
    }
    spdlog::debug("libtorch CPU threads: {}", at::get_num_threads());
    const c10::Device device = parse_device(global.device);
    const FileOptions files{{global.allow_unverified, global.allow_external_symlinks, {}},
                            static_cast<std::uintmax_t>(global.max_tensor_file_mib) << 20};

    if (info->parsed()) {
      return run_info_command(info_options, device, files);
    }
    if (run->parsed()) {
      return run_run_command(run_options, device, files);
    }
    if (check->parsed()) {
      return run_check_command(check_options, device, files);
    }
    if (bench->parsed()) {
      return run_bench_command(bench_options, device, files);
    }
    if (stress->parsed()) {
      return run_stress_command(stress_options, device, files);
    }
    return kExitUsage;  // unreachable: require_subcommand(1)
  } catch (const UsageError& e) {
    spdlog::error("{}", printable(e.what()));
    return kExitUsage;
  } catch (const std::exception& e) {
    // c10::Error from a forward (an operator's TORCH_CHECK), or anything else unforeseen.
    spdlog::error("{}", torch_error_message(e));
    return kExitModelFailed;
  }
}
