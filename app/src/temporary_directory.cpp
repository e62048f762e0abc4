#include "temporary_directory.h"

#include <ftw.h>
#include <spdlog/spdlog.h>
#include <stdio.h>
#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "app_error.h"
#include "file_access.h"

namespace fusedops_app {

namespace fs = std::filesystem;

namespace {

int remove_entry(const char* path, const struct stat*, int, struct FTW*) {
  return ::remove(path) == 0 ? 0 : errno;
}

}  // namespace

TemporaryDirectory::TemporaryDirectory(const std::string& purpose) {
  const fs::path base = temporary_folder();
  std::string pattern = (base / ("fusedops_app-" + purpose + "-XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw UsageError("cannot create a temporary folder in " + base.string() + ": " +
                     std::strerror(errno));
  }
  path_ = pattern;
}

TemporaryDirectory::~TemporaryDirectory() { remove(); }

void TemporaryDirectory::remove() {
  if (path_.empty()) {
    return;
  }
  // Children before their folder (FTW_DEPTH), links removed rather than followed (FTW_PHYS).
  // Not std::filesystem::remove_all: libtorch.so exports a copy of it that a program linked
  // with libtorch binds to, and that copy crashes (torch 2.11).
  const int failed = ::nftw(path_.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  if (failed != 0) {
    spdlog::warn("could not remove the temporary folder {}: {}", path_.string(),
                 std::strerror(failed > 0 ? failed : errno));
  }
  path_.clear();
}

}  // namespace fusedops_app
