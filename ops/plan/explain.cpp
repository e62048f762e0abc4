#include "plan/explain.h"

#include <cstdio>
#include <mutex>
#include <sstream>
#include <unordered_set>
#include <utility>

namespace fusedops::plan {
namespace {

thread_local bool t_recording = false;
thread_local std::vector<std::string> t_record;

void report(std::string line) {
  if (settings().log_routes) {
    static std::mutex mutex;
    static auto* seen = new std::unordered_set<std::string>();
    std::lock_guard<std::mutex> lock(mutex);
    if (seen->insert(line).second) std::fprintf(stderr, "fusedops route: %s\n", line.c_str());
  }
  if (t_recording) t_record.push_back(std::move(line));
}

bool reporting() { return t_recording || settings().log_routes; }

}  // namespace

std::string describe(const GemmRequest& r, const Plan& plan, int device_index) {
  std::ostringstream line;
  line << r.op << ' ' << dtype_name(r.dtype) << (r.autocast_form ? " autocast" : "")
       << ' ' << (r.numerics == Numerics::kEager ? "eager" : "accurate") << " m=" << r.m << " n=" << r.n
       << " k=" << r.k << " cuda:" << device_index << ": " << route_name(plan.route) << " ("
       << plan.why << ')';
  return line.str();
}

void note_plan(const GemmRequest& request, const Plan& plan, int device_index) {
  if (reporting()) report(describe(request, plan, device_index));
}

void note_fallback(const GemmRequest& request, const Plan& plan, int device_index,
                   const char* refused) {
  if (!reporting()) return;
  const Plan ran{plan.fallback, Route::kNone, refused};
  report(describe(request, ran, device_index) + " instead of " + route_name(plan.route));
}

void record_routes(bool on) {
  t_recording = on;
  if (on) t_record.clear();
}

std::vector<std::string> take_routes() { return std::exchange(t_record, {}); }

}  // namespace fusedops::plan
