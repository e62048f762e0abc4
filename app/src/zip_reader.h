// The one zip reader for untrusted bytes: .pt2 packages and torch.save tensor files are both
// zip archives, and both are read with libzip, which compares the central directory with each
// local header (ZIP_CHECKCONS) and checks each entry's CRC as it is read.
//
// Why not libtorch's PyTorchStreamReader (miniz) for tensor files: its constructor allocates
// whatever size the archive's directory states for the `version` and serialization-id records
// before reading a byte of them, so a 1.6 KB file stating a 2 GiB deflated `version` took
// 2.5 GB of memory (6.8 GB through the serialization id) before `run --input` refused it
// (found by the fuzzer, CI on ffab145). Here a size is only a claim until the bytes are counted.
#pragma once

#include <sys/types.h>
#include <zip.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace fusedops_app {

// An archive over bytes the caller keeps alive; closed (never written) on destruction. Every
// failure is a UsageError beginning with context ("cannot read a tensor from x.pt", ...).
class ZipReader {
 public:
  // Opens the archive, and refuses it unless its central directory agrees with each local
  // header and every entry's stated size is one its stored bytes can unpack to: exactly its
  // compressed size when stored, at most 1032 times it when deflated (deflate's largest
  // ratio). A damaged or forged size field is refused here, before any reader takes it as a
  // size: ours, or libtorch's, which a TorchScript model is handed on to.
  ZipReader(const std::vector<char>& bytes, std::string context);
  ZipReader(const ZipReader&) = delete;
  ZipReader& operator=(const ZipReader&) = delete;
  ~ZipReader();

  zip_uint64_t size() const;
  std::string name(zip_uint64_t index) const;
  // The size the directory states: a claim, not yet a fact (read and counted_size check it).
  zip_uint64_t unpacked_size(zip_uint64_t index) const;
  // The Unix file type an entry records (S_IFREG, S_IFLNK, ...), or 0 when it records none.
  mode_t file_type(zip_uint64_t index) const;

  // Streams the entry's bytes to sink(data, size) in pieces of at most 1 MiB, and fails unless
  // the entry holds exactly the bytes its directory states (libzip checks the CRC, not the
  // size): a caller that bounded the stated size has bounded what the sink receives.
  void read(zip_uint64_t index, const std::function<void(const char*, size_t)>& sink) const;
  // read, keeping nothing: the stated size once it is a fact, which the caller may allocate.
  zip_uint64_t counted_size(zip_uint64_t index) const;
  // The one top folder every entry lies under, with its "/" ("archive/", "model/"), as
  // libtorch's PyTorchStreamWriter writes archives; fails on an empty archive, an entry outside
  // the folder and a name given twice (a folder entry "x/" and a file "x" are one name).
  std::string top_folder() const;

  [[noreturn]] void fail(const std::string& what) const;

 private:
  void refuse_impossible_sizes() const;

  std::string context_;
  zip_t* archive_ = nullptr;
};

}  // namespace fusedops_app
