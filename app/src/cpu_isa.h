// Whether this CPU can run a CPU .pt2: AOTInductor compiles it for the exporting machine's
// instruction set, and running it on a CPU without one of those instructions dies of SIGILL.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace fusedops_app {

// This CPU's instruction set extensions, as libtorch's cpuinfo sees them
// (at::cpu::get_cpu_capabilities: "avx2", "avx512_f", "amx_tile", ... -> present), and
// "architecture" (x86_64, ...). The same names Python's torch.cpu.get_capabilities() gives.
struct HostCpu {
  std::string architecture;
  std::map<std::string, bool> features;
  static HostCpu detect();
};

// Throws UsageError naming source, what the package needs and what this CPU lacks, unless host
// has: the architecture the package was compiled on (AOTInductor's AOTI_MACHINE); every
// extension behind each word of AOTI_CPU_ISA ("AVX512 AVX512_VNNI": the flags AOTInductor
// compiled its vector code with); and every extension in exporter_features (fusedops.json's
// cpu_features: the exporting CPU's, which -march=native lets the compiler use anywhere).
// A word of AOTI_CPU_ISA this app does not know is refused too: it cannot be checked.
void check_cpu_can_run(const std::string& aoti_cpu_isa, const std::string& aoti_machine,
                       const std::vector<std::string>& exporter_features, const HostCpu& host,
                       const std::string& source);

}  // namespace fusedops_app
