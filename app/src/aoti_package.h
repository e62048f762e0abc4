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

#include <cstdint>
#include <memory>
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

 private:
  AotiPackage();
  // Declared before the runner, so destroyed after it: the library is unloaded first.
  std::unique_ptr<TemporaryDirectory> folder_;
  std::unique_ptr<torch::inductor::AOTIModelContainerRunner> runner_;
};

}  // namespace fusedops_app
