#include "file_access.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <stdio.h>  // renameat2 (glibc, _GNU_SOURCE)
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <system_error>

#include "app_error.h"

namespace fusedops_app {

namespace fs = std::filesystem;

namespace {

std::string errno_text(int error = errno) { return std::strerror(error); }

// What a file of this mode is, for messages.
std::string kind_of(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Closes a file descriptor when it goes out of scope.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) {
      ::close(fd_);
    }
  }
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  // Closes now, reporting the error a delayed write may only show here.
  bool close() { return ::close(release()) == 0; }

 private:
  int fd_;
};

[[noreturn]] void refuse_kind(const fs::path& path, mode_t mode, const std::string& what) {
  throw UsageError(fmt::format("{} is {}; expected a {} (a regular file)", path.string(),
                               kind_of(mode), what));
}

}  // namespace

RegularFile::RegularFile(int fd, fs::path path, std::uintmax_t size)
    : fd_(fd), path_(std::move(path)), size_(size) {}

RegularFile::RegularFile(RegularFile&& other) noexcept
    : fd_(other.fd_), path_(std::move(other.path_)), size_(other.size_) {
  other.fd_ = -1;
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) {
    ::close(fd_);
  }
}

RegularFile RegularFile::open(const fs::path& path, const std::string& what) {
  // The type first, by name: a device is never even opened (opening one can have effects of
  // its own, a tape rewinding). Then again on the descriptor, which is what is read: the name
  // may have been replaced in between.
  struct stat status {};
  if (::stat(path.c_str(), &status) != 0) {
    throw UsageError(fmt::format("cannot open {} {}: {}", what, path.string(), errno_text()));
  }
  if (!S_ISREG(status.st_mode)) {
    refuse_kind(path, status.st_mode, what);
  }
  FileDescriptor file(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (file.get() < 0) {
    throw UsageError(fmt::format("cannot open {} {}: {}", what, path.string(), errno_text()));
  }
  if (::fstat(file.get(), &status) != 0) {
    throw UsageError(fmt::format("cannot read {} {}: {}", what, path.string(), errno_text()));
  }
  if (!S_ISREG(status.st_mode)) {
    refuse_kind(path, status.st_mode, what);
  }
  return RegularFile(file.release(), path, static_cast<std::uintmax_t>(status.st_size));
}

std::vector<char> RegularFile::read_all(const ReadLimit& limit) {
  if (size_ > limit.max_bytes) {
    throw UsageError(fmt::format("{} is {} bytes, more than the {}-byte limit for a {}{}",
                                 path_.string(), size_, limit.max_bytes, limit.what,
                                 limit.option.empty() ? ""
                                                      : " (raise it with " + limit.option + ")"));
  }
  std::vector<char> bytes;
  try {
    bytes.resize(static_cast<size_t>(size_));
  } catch (const std::bad_alloc&) {
    // Bad input, not a failing model: a file that cannot be held is exit status 2.
    throw UsageError(fmt::format("{} is {} bytes, more than this process can hold in memory",
                                 path_.string(), size_));
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::read(fd_, bytes.data() + done, bytes.size() - done);
    if (got < 0 && errno == EINTR) {
      continue;
    }
    if (got < 0) {
      throw UsageError(fmt::format("cannot read {} {}: {}", limit.what, path_.string(),
                                   errno_text()));
    }
    if (got == 0) {
      throw UsageError(fmt::format("{} shrank to {} bytes while being read ({} when opened)",
                                   path_.string(), done, size_));
    }
    done += static_cast<size_t>(got);
  }
  char extra = 0;
  if (::read(fd_, &extra, 1) > 0) {
    throw UsageError(fmt::format("{} grew while being read ({} bytes when opened)",
                                 path_.string(), size_));
  }
  return bytes;
}

std::vector<char> read_file_bounded(const fs::path& path, const ReadLimit& limit) {
  return RegularFile::open(path, limit.what).read_all(limit);
}

namespace {

// The mode of what is at path itself (lstat), nullopt when nothing is.
std::optional<mode_t> mode_at(const fs::path& path) {
  struct stat status {};
  if (::lstat(path.c_str(), &status) != 0) {
    if (errno == ENOENT) {
      return std::nullopt;
    }
    throw UsageError(fmt::format("cannot examine {}: {}", path.string(), errno_text()));
  }
  return status.st_mode;
}

// rename(), refusing to replace anything when replace is false (RENAME_NOREPLACE; a file
// system without it gets link() + unlink(), which never replaces either).
int rename_file(const std::string& from, const fs::path& to, bool replace) {
  if (replace) {
    return ::rename(from.c_str(), to.c_str());
  }
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) {
    return 0;
  }
  if (errno != EINVAL && errno != ENOSYS) {
    return -1;
  }
  if (::link(from.c_str(), to.c_str()) != 0) {
    return -1;
  }
  ::unlink(from.c_str());
  return 0;
}

}  // namespace

std::optional<std::string> what_is_at(const fs::path& path) {
  const std::optional<mode_t> mode = mode_at(path);
  return mode ? std::optional<std::string>(kind_of(*mode)) : std::nullopt;
}

void check_inside(const fs::path& path, const fs::path& root, bool allow_outside) {
  if (allow_outside) {
    return;
  }
  std::error_code error;
  const fs::path resolved = fs::canonical(path, error);
  if (error) {
    if (error == std::errc::no_such_file_or_directory) {
      return;  // reported as missing where it is read
    }
    throw UsageError(fmt::format("cannot resolve {}: {}", path.string(), error.message()));
  }
  const auto [root_end, resolved_at] =
      std::mismatch(root.begin(), root.end(), resolved.begin(), resolved.end());
  if (root_end != root.end()) {
    throw UsageError(fmt::format("{} leads to {}, outside {}: a symbolic link out of the "
                                 "model folder or repository is not followed "
                                 "(--allow-external-symlinks follows it)",
                                 path.string(), resolved.string(), root.string()));
  }
}

void check_writable(const fs::path& path, ExistingFile existing, const std::string& option) {
  const std::optional<mode_t> mode = mode_at(path);
  if (!mode) {
    return;
  }
  if (!S_ISREG(*mode)) {
    throw UsageError(fmt::format("{} {} is {}; only a regular file is ever replaced (with "
                                 "--force), never a device, FIFO, socket, folder or symbolic "
                                 "link",
                                 option, path.string(), kind_of(*mode)));
  }
  if (existing == ExistingFile::kKeep) {
    throw UsageError(fmt::format("{} {} exists; pass --force to replace it", option,
                                 path.string()));
  }
}

void write_file_atomically(const fs::path& path, const std::vector<char>& bytes,
                           ExistingFile existing, const std::string& option) {
  check_writable(path, existing, option);
  const fs::path folder = path.has_parent_path() ? path.parent_path() : fs::path(".");
  // A hidden name in the same folder: rename() is atomic only within one file system.
  std::string temporary = (folder / ("." + path.filename().string() + ".tmp-XXXXXX")).string();
  FileDescriptor file(::mkstemp(temporary.data()));
  if (file.get() < 0) {
    throw UsageError(fmt::format("cannot create a temporary file in {} to write {}: {}",
                                 folder.string(), path.string(), errno_text()));
  }
  auto fail = [&](const std::string& step, int error) {
    ::unlink(temporary.c_str());
    throw UsageError(fmt::format("cannot write {} ({}): {}", path.string(), step,
                                 errno_text(error)));
  };
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t wrote = ::write(file.get(), bytes.data() + done, bytes.size() - done);
    if (wrote < 0 && errno == EINTR) {
      continue;
    }
    if (wrote <= 0) {
      fail("write", errno);
    }
    done += static_cast<size_t>(wrote);
  }
  // mkstemp makes the file 0600; a written result is as readable as any file the user makes.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  if (::fchmod(file.get(), 0666 & ~mask) != 0 || ::fsync(file.get()) != 0) {
    fail("flush", errno);
  }
  if (!file.close()) {
    fail("close", errno);
  }
  // Checked again just before the rename: the path may have changed while the output was being
  // computed. Without --force the rename itself refuses whatever appeared (RENAME_NOREPLACE).
  try {
    check_writable(path, existing, option);
  } catch (...) {
    ::unlink(temporary.c_str());
    throw;
  }
  if (rename_file(temporary, path, existing == ExistingFile::kReplace) != 0) {
    const int error = errno;
    if (error == EEXIST) {
      ::unlink(temporary.c_str());
      throw UsageError(fmt::format("{} {} appeared while the output was being computed; pass "
                                   "--force to replace it",
                                   option, path.string()));
    }
    fail("rename", error);
  }
}

fs::path temporary_folder() {
  const char* tmpdir = std::getenv("TMPDIR");
  const fs::path folder = tmpdir != nullptr && tmpdir[0] != '\0' ? fs::path(tmpdir) : "/tmp";
  std::error_code error;
  if (!fs::is_directory(folder, error)) {
    throw UsageError(fmt::format("no temporary folder: {} is not a folder{} (set TMPDIR to one, "
                                 "or leave it unset or empty for /tmp)",
                                 folder.string(), error ? " (" + error.message() + ")" : ""));
  }
  return folder;
}

FolderIdentity folder_identity(const std::filesystem::path& folder) {
  struct stat status {};
  if (::stat(folder.c_str(), &status) != 0) {
    return {};
  }
  return {status.st_dev, status.st_ino,
          static_cast<int64_t>(status.st_ctim.tv_sec) * 1'000'000'000 + status.st_ctim.tv_nsec,
          true};
}

void throw_folder_kept_changing(const std::filesystem::path& folder) {
  throw UsageError(fmt::format("{} was replaced while it was being read, {} times in a row (an "
                               "export writing it?); try again when it is done",
                               folder.string(), kMaxFolderReadAttempts));
}

}  // namespace fusedops_app
