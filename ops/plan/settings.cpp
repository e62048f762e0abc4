#include "plan/settings.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

namespace fusedops::plan {
namespace {

// One error style for every setting: "<NAME> must be <allowed>, got <value>".
void fail(Settings& s, const char* name, const char* allowed, const char* value) {
  if (s.error.empty()) {
    s.error = std::string("fusedops: ") + name + " must be " + allowed + ", got " + value;
  }
}

// The value of setting `name` among its spellings; unset, or bad (recorded in s), the first.
template <class Enum, size_t N>
Enum parse_choice(Settings& s, EnvLookup lookup, void* context, const char* name,
                  const char* allowed, const std::pair<const char*, Enum> (&choices)[N]) {
  const char* value = lookup(name, context);
  if (value == nullptr) return choices[0].second;
  for (const auto& [spelling, choice] : choices) {
    if (std::strcmp(value, spelling) == 0) return choice;
  }
  fail(s, name, allowed, value);
  return choices[0].second;
}

const char* real_getenv(const char* name, void*) { return std::getenv(name); }

}  // namespace

Settings parse_settings(EnvLookup lookup, void* context) {
  Settings s;
  s.fp32_gemm = parse_choice<Fp32GemmSetting>(
      s, lookup, context, "FUSEDOPS_FP32_GEMM", "auto, ieee, 3xtf32 or 3xfp16",
      {{"auto", Fp32GemmSetting::kAuto}, {"ieee", Fp32GemmSetting::kIeee},
       {"3xtf32", Fp32GemmSetting::k3xTf32}, {"3xfp16", Fp32GemmSetting::k3xFp16}});
  s.half_gemm = parse_choice<HalfGemmSetting>(
      s, lookup, context, "FUSEDOPS_HALF_GEMM", "auto, cublas or fused",
      {{"auto", HalfGemmSetting::kAuto}, {"cublas", HalfGemmSetting::kCublas},
       {"fused", HalfGemmSetting::kFused}});
  if (const char* chunk = lookup("FUSEDOPS_3XTF32_CHUNK", context)) {
    char* end = nullptr;
    const long long v = std::strtoll(chunk, &end, 10);
    if (end == chunk || *end != '\0' || v < 32 || v % 32 != 0 || v > (1 << 20)) {
      fail(s, "FUSEDOPS_3XTF32_CHUNK", "a positive multiple of 32 (at most 1048576)", chunk);
    } else {
      s.tf32x3_chunk = v;
    }
  }
  s.log_routes = parse_choice<bool>(s, lookup, context, "FUSEDOPS_LOG", "empty or routes",
                                    {{"", false}, {"routes", true}});
  s.check_folds = parse_choice<bool>(s, lookup, context, "FUSEDOPS_CHECK_FOLDS", "0 or 1",
                                     {{"0", false}, {"1", true}});
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
