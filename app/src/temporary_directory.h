// A private folder that is removed with everything in it when its owner goes away, on success
// and when an exception unwinds alike.
#pragma once

#include <filesystem>
#include <string>

namespace fusedops_app {

class TemporaryDirectory {
 public:
  // mkdtemp("<temp>/fusedops_app-<purpose>-XXXXXX"), mode 0700, where <temp> is $TMPDIR, or
  // /tmp when it is unset or empty (file_access.h's temporary_folder). Throws UsageError when it
  // cannot be made.
  explicit TemporaryDirectory(const std::string& purpose);
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;
  ~TemporaryDirectory();

  const std::filesystem::path& path() const { return path_; }
  // Removes the folder now (the destructor then has nothing to do).
  void remove();

 private:
  std::filesystem::path path_;
};

}  // namespace fusedops_app
