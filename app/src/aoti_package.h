// An AOTInductor package (model.pt2, a zip archive) opened without trusting it: every entry is
// inspected with libzip before anything is written, only the model's own files are unpacked,
// into a private temporary folder that is always removed, and the compiled library is loaded
// with libtorch's AOTInductor runner.
//
// libtorch's AOTIModelPackageLoader is not used: it unpacks into a fixed /tmp/XXXXXX (TMPDIR is
// not honoured) that stays behind when its constructor throws, writes an entry named
// "model/data/aotinductor/model/../../x" outside that folder, and compiles a package that holds
// C++ sources without a library by running the compiler command line the package gives.
#pragma once

#include <c10/core/Device.h>

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace torch::inductor {
class AOTIModelContainerRunner;
}

namespace fusedops_app {

class TemporaryDirectory;

// The model inside a .pt2 that aoti_compile_and_package writes by default, and the one Triton's
// torch_aoti platform loads.
inline constexpr const char* kAotiPackageModelName = "model";
// Keys AOTInductor itself writes into every package's metadata.
inline constexpr const char* kAotiDeviceKey = "AOTI_DEVICE_KEY";
inline constexpr const char* kAotiCpuIsaKey = "AOTI_CPU_ISA";
inline constexpr const char* kAotiMachineKey = "AOTI_MACHINE";
inline constexpr const char* kAotiComputeCapabilityKey = "AOTI_COMPUTE_CAPABILITY";
// Upper bound on what a package may unpack to: a zip entry's stated size is what an extractor
// allocates or writes, and a few bytes of deflate can claim gigabytes.
inline constexpr std::uintmax_t kMaxPackageUnpackedBytes = std::uintmax_t{64} << 30;

// What inspect_aoti_package found, before anything is unpacked.
struct AotiPackageContents {
  // The package's metadata (AOTI_DEVICE_KEY, AOTI_CPU_ISA, ..., fusedops.json).
  std::unordered_map<std::string, std::string> metadata;
  // Entries to unpack, each with the path it gets inside the unpacked model folder.
  std::vector<std::pair<std::string, std::string>> files;
  std::string library;  // the compiled model's .so, as a path inside the model folder
  std::string weights_blob;  // the weights as a separate .blob, when the package has one
};

// Reads the archive's directory and the model's metadata from bytes. Throws UsageError naming
// source for: bytes that are not a zip archive; an entry name that is absolute, holds "..", a
// backslash or a control character, or appears twice; an entry that is a symbolic link or
// another non-regular file; sizes adding up past kMaxPackageUnpackedBytes; no model "model";
// metadata that is not a JSON object of strings; a package without a compiled library.
AotiPackageContents inspect_aoti_package(const std::vector<char>& bytes,
                                         const std::string& source);

class AotiPackage {
 public:
  // Unpacks contents.files from bytes into a private temporary folder and loads the library
  // for device. On the CPU the folder is removed as soon as the library is loaded; a CUDA
  // package loads its kernels from it on first use, so it lives as long as the package.
  static std::unique_ptr<AotiPackage> load(const std::vector<char>& bytes,
                                           const AotiPackageContents& contents,
                                           const c10::Device& device, const std::string& source);
  ~AotiPackage();

  torch::inductor::AOTIModelContainerRunner& runner() { return *runner_; }
  const torch::inductor::AOTIModelContainerRunner& runner() const { return *runner_; }

  // Runs the model; safe from any number of threads at once, the first call included.
  //
  // Why the first call is serialized: the runner holds one model instance (a server's threads
  // share one loaded package, as Triton's instances share weights), and torch's container
  // (aoti_runtime/model_container.h, run()) takes that instance under a shared lock and, on
  // the first call, when its constants are not yet folded, drops the shared lock and waits for
  // the exclusive one, still holding the instance. A second caller that got the shared lock in
  // between waits for a free instance while holding it: neither ever goes on (issue 36: `stress
  // --instances 2 --weights shared` on a .pt2 hung 2-8% of runs). Once a call has folded the
  // constants, run() takes only the shared lock, and a caller waiting for the instance is woken
  // when the other's call finishes. So the first call runs alone; a failed first call leaves
  // the next one to do it.
  std::vector<at::Tensor> run(std::vector<at::Tensor> inputs);

 private:
  AotiPackage();
  std::mutex first_run_;
  std::atomic<bool> constants_folded_{false};
  // Declared before the runner, so destroyed after it: the library is unloaded first.
  std::unique_ptr<TemporaryDirectory> folder_;
  std::unique_ptr<torch::inductor::AOTIModelContainerRunner> runner_;
};

}  // namespace fusedops_app
