// Bytes in memory as libtorch's archive reader input, never read past their end.
#pragma once

#include <caffe2/serialize/read_adapter_interface.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace fusedops_app {

// A read past the end returns fewer bytes (or none), which the zip reader reports as a damaged
// archive. libtorch's own in-memory adapters (MemoryReadAdapter, and the VectorReader behind
// torch::jit::pickle_load) copy whatever is asked for, and miniz asks for bytes past the end of
// a damaged archive: the fuzzer's first finding (app/fuzz/fuzz_tensor_file.cpp). Tensor files
// have since left libtorch's reader for libzip (zip_reader.h); TorchScript model files, which
// are code and trusted as such, still load through it (torch::jit::load in exported_model.cpp).
class BoundedReadAdapter final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BoundedReadAdapter(const std::vector<char>& bytes) : bytes_(bytes) {}

  size_t size() const override { return bytes_.size(); }

  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= bytes_.size()) {
      return 0;
    }
    const size_t available = std::min<uint64_t>(n, bytes_.size() - pos);
    std::memcpy(buf, bytes_.data() + pos, available);
    return available;
  }

 private:
  const std::vector<char>& bytes_;  // the caller keeps them alive while the reader lives
};

}  // namespace fusedops_app
