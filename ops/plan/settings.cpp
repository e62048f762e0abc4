#include "plan/settings.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

namespace fusedops::plan {
namespace {

// One error style for every setting: "<NAME> must be <allowed>, got <value>".
void fail(Settings& s, const char* name, const char* allowed, const char* value) {
  if (s.error.empty()) {
    s.error = std::string("fusedops: ") + name + " must be " + allowed + ", got " + value;
  }
}

template <class Enum, size_t N>
Enum parse_choice(Settings& s, const char* name, const char* value, const char* allowed,
                  const char* const (&names)[N], const Enum (&values)[N], Enum fallback) {
  if (value == nullptr) return fallback;
  for (size_t i = 0; i < N; ++i) {
    if (std::strcmp(value, names[i]) == 0) return values[i];
  }
  fail(s, name, allowed, value);
  return fallback;
}

const char* real_getenv(const char* name, void*) { return std::getenv(name); }

}  // namespace

Settings parse_settings(EnvLookup lookup, void* context) {
  Settings s;
  {
    static const char* const names[] = {"auto", "ieee", "3xtf32", "3xfp16"};
    static const Fp32GemmSetting values[] = {Fp32GemmSetting::kAuto, Fp32GemmSetting::kIeee,
                                             Fp32GemmSetting::k3xTf32, Fp32GemmSetting::k3xFp16};
    s.fp32_gemm = parse_choice(s, "FUSEDOPS_FP32_GEMM", lookup("FUSEDOPS_FP32_GEMM", context),
                               "auto, ieee, 3xtf32 or 3xfp16", names, values,
                               Fp32GemmSetting::kAuto);
  }
  {
    static const char* const names[] = {"auto", "cublas", "fused"};
    static const HalfGemmSetting values[] = {HalfGemmSetting::kAuto, HalfGemmSetting::kCublas,
                                             HalfGemmSetting::kFused};
    s.half_gemm = parse_choice(s, "FUSEDOPS_HALF_GEMM", lookup("FUSEDOPS_HALF_GEMM", context),
                               "auto, cublas or fused", names, values, HalfGemmSetting::kAuto);
  }
  if (const char* chunk = lookup("FUSEDOPS_3XTF32_CHUNK", context)) {
    char* end = nullptr;
    const long long v = std::strtoll(chunk, &end, 10);
    if (end == chunk || *end != '\0' || v < 32 || v % 32 != 0 || v > (1 << 20)) {
      fail(s, "FUSEDOPS_3XTF32_CHUNK", "a positive multiple of 32 (at most 1048576)", chunk);
    } else {
      s.tf32x3_chunk = v;
    }
  }
  {
    static const char* const names[] = {"", "routes"};
    static const bool values[] = {false, true};
    s.log_routes = parse_choice(s, "FUSEDOPS_LOG", lookup("FUSEDOPS_LOG", context),
                                "empty or routes", names, values, false);
  }
  {
    static const char* const names[] = {"0", "1"};
    static const bool values[] = {false, true};
    s.check_folds = parse_choice(s, "FUSEDOPS_CHECK_FOLDS", lookup("FUSEDOPS_CHECK_FOLDS", context),
                                 "0 or 1", names, values, false);
  }
  return s;
}

namespace {

// The current table. Replaced tables are kept (a reload is rare and a table is small), so a
// reference handed out by settings() stays valid for the rest of the process: the hot path
// is one atomic load, no lock.
std::atomic<const Settings*> g_current{nullptr};
std::mutex g_reload_mutex;

const Settings* install(Settings parsed) {
  static std::vector<const Settings*>* kept = new std::vector<const Settings*>();
  const Settings* table = new Settings(std::move(parsed));
  kept->push_back(table);
  g_current.store(table, std::memory_order_release);
  return table;
}

}  // namespace

const Settings& settings() {
  const Settings* current = g_current.load(std::memory_order_acquire);
  if (current != nullptr) return *current;
  std::lock_guard<std::mutex> lock(g_reload_mutex);
  current = g_current.load(std::memory_order_acquire);
  return current != nullptr ? *current : *install(parse_settings(real_getenv, nullptr));
}

void reload_settings() {
  const Settings* table = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_reload_mutex);
    table = install(parse_settings(real_getenv, nullptr));
  }
  TORCH_CHECK(table->error.empty(), table->error);
}

void check_settings() {
  const Settings& s = settings();
  TORCH_CHECK(s.error.empty(), s.error);
}

void check_cpu_call(const char* op, c10::ScalarType dtype) {
  const Settings& s = settings();
  TORCH_CHECK(s.error.empty(), s.error);
  if (dtype == c10::kHalf || dtype == c10::kBFloat16) {
    TORCH_CHECK(s.half_gemm == HalfGemmSetting::kAuto, "fusedops ", op, ": FUSEDOPS_HALF_GEMM=",
                s.half_gemm == HalfGemmSetting::kCublas ? "cublas" : "fused",
                " forces a CUDA GEMM, and this call runs on the CPU (its exact kernel); unset "
                "it or set auto for CPU calls");
  } else if (dtype == c10::kFloat) {
    TORCH_CHECK(s.fp32_gemm != Fp32GemmSetting::k3xTf32 && s.fp32_gemm != Fp32GemmSetting::k3xFp16,
                "fusedops ", op, ": FUSEDOPS_FP32_GEMM=",
                s.fp32_gemm == Fp32GemmSetting::k3xTf32 ? "3xtf32" : "3xfp16",
                " forces a CUDA GEMM, and this call runs on the CPU (its exact kernel); unset "
                "it or set auto or ieee for CPU calls");
  }
}

}  // namespace fusedops::plan
