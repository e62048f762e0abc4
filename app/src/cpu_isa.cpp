#include "cpu_isa.h"

#include <ATen/cpu/Utils.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <sstream>

#include "app_error.h"
#include "printable.h"

namespace fusedops_app {

namespace {

// The extensions each word of AOTI_CPU_ISA compiles with (torch/_inductor/cpu_vec_isa.py:
// VecAVX2 "-mavx2 -mfma -mf16c", VecAVX512 "-mavx512f -mavx512dq -mavx512vl -mavx512bw
// -mfma", VecAVX512VNNI adds -mavx512vnni, VecAMX -mamx-tile -mamx-bf16 -mamx-int8), in
// cpuinfo's names; and the architectures the non-x86 words belong to.
struct IsaWord {
  std::vector<std::string> features;
  std::string architecture;  // empty: x86_64
};

const std::map<std::string, IsaWord>& isa_words() {
  static const std::map<std::string, IsaWord> words = {
      {"AVX2", {{"avx2", "fma3", "f16c"}, "x86_64"}},
      {"AVX512", {{"avx512_f", "avx512_dq", "avx512_vl", "avx512_bw", "fma3"}, "x86_64"}},
      {"AVX512_VNNI", {{"avx512_vnni", "avx512_vl"}, "x86_64"}},
      {"AMX_TILE", {{"amx_tile", "amx_bf16", "amx_int8"}, "x86_64"}},
      {"NEON", {{}, "arm64"}},
      {"ASIMD", {{}, "arm64"}},
      // No vector code: nothing to check.
      {"INVALID_VEC_ISA", {{}, ""}},
  };
  return words;
}

// Python's platform.machine() and cpuinfo name some architectures differently.
std::string canonical_architecture(const std::string& name) {
  if (name == "aarch64") {
    return "arm64";
  }
  if (name == "amd64" || name == "AMD64") {
    return "x86_64";
  }
  return name;
}

}  // namespace

HostCpu HostCpu::detect() {
  HostCpu host;
  for (const auto& [name, value] : at::cpu::get_cpu_capabilities()) {
    if (value.isBool()) {
      host.features[name] = value.toBool();
    } else if (name == "architecture" && value.isString()) {
      host.architecture = value.toStringRef();
    }
  }
  return host;
}

void check_cpu_can_run(const std::string& aoti_cpu_isa, const std::string& aoti_machine,
                       const std::vector<std::string>& exporter_features, const HostCpu& host,
                       const std::string& source) {
  const std::string host_arch = canonical_architecture(host.architecture);
  if (!aoti_machine.empty() && canonical_architecture(aoti_machine) != host_arch) {
    throw UsageError(fmt::format("{} was compiled by AOTInductor for {} CPUs; this one is {}",
                                 source, printable(aoti_machine), host_arch));
  }
  std::vector<std::string> needed;
  std::istringstream words(aoti_cpu_isa);
  for (std::string word; words >> word;) {
    const auto found = isa_words().find(word);
    if (found == isa_words().end()) {
      throw UsageError(fmt::format("{} was compiled for instruction set {} (AOTI_CPU_ISA '{}'), "
                                   "which this app cannot check on this CPU; re-export it here "
                                   "or deploy the model.pt",
                                   source, printable(word), printable(aoti_cpu_isa)));
    }
    if (!found->second.architecture.empty() && found->second.architecture != host_arch) {
      throw UsageError(fmt::format("{} was compiled for {} ({}); this CPU is {}", source, word,
                                   found->second.architecture, host_arch));
    }
    needed.insert(needed.end(), found->second.features.begin(), found->second.features.end());
  }
  needed.insert(needed.end(), exporter_features.begin(), exporter_features.end());

  std::vector<std::string> missing;
  for (const std::string& feature : needed) {
    const auto found = host.features.find(feature);
    const bool present = found != host.features.end() && found->second;
    if (!present && std::find(missing.begin(), missing.end(), feature) == missing.end()) {
      missing.push_back(printable(feature));
    }
  }
  if (!missing.empty()) {
    throw UsageError(fmt::format(
        "{} was compiled for a CPU with [{}] (AOTI_CPU_ISA '{}', and the exporting CPU's "
        "extensions, which -march=native lets the compiler use); this CPU lacks [{}], and "
        "running it would stop at the first such instruction (SIGILL). Export the .pt2 on "
        "this machine (or one like it), or deploy the model.pt, which runs on any CPU",
        source, printable(fmt::format("{}", fmt::join(needed, ", "))), printable(aoti_cpu_isa),
        fmt::join(missing, ", ")));
  }
}

}  // namespace fusedops_app
