#include "file_access.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "app_error.h"

namespace fusedops_app {

namespace fs = std::filesystem;

namespace {

std::string errno_text() { return std::strerror(errno); }

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
  // Closes now, reporting the error a delayed write may only show here.
  bool close() {
    const int fd = fd_;
    fd_ = -1;
    return ::close(fd) == 0;
  }

 private:
  int fd_;
};

}  // namespace

std::vector<char> read_file_bounded(const fs::path& path, const ReadLimit& limit) {
  const FileDescriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (file.get() < 0) {
    throw UsageError("cannot open " + limit.what + " " + path.string() + ": " + errno_text());
  }
  struct stat status {};
  if (::fstat(file.get(), &status) != 0) {
    throw UsageError("cannot read " + limit.what + " " + path.string() + ": " + errno_text());
  }
  if (!S_ISREG(status.st_mode)) {
    throw UsageError(path.string() + " is not a regular file; expected a " + limit.what);
  }
  const auto size = static_cast<std::uintmax_t>(status.st_size);
  if (size > limit.max_bytes) {
    throw UsageError(path.string() + " is " + std::to_string(size) + " bytes, more than the " +
                     std::to_string(limit.max_bytes) + "-byte limit for a " + limit.what +
                     (limit.option.empty() ? "" : " (raise it with " + limit.option + ")"));
  }
  std::vector<char> bytes(static_cast<size_t>(size));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::read(file.get(), bytes.data() + done, bytes.size() - done);
    if (got < 0 && errno == EINTR) {
      continue;
    }
    if (got < 0) {
      throw UsageError("cannot read " + limit.what + " " + path.string() + ": " + errno_text());
    }
    if (got == 0) {
      throw UsageError(path.string() + " shrank to " + std::to_string(done) + " bytes while " +
                       "being read (" + std::to_string(size) + " when opened)");
    }
    done += static_cast<size_t>(got);
  }
  return bytes;
}

void write_file_atomically(const fs::path& path, const std::vector<char>& bytes) {
  const fs::path folder = path.has_parent_path() ? path.parent_path() : fs::path(".");
  // A hidden name in the same folder: rename() is atomic only within one file system.
  std::string temporary = (folder / ("." + path.filename().string() + ".tmp-XXXXXX")).string();
  FileDescriptor file(::mkstemp(temporary.data()));
  if (file.get() < 0) {
    throw UsageError("cannot create a temporary file in " + folder.string() + " to write " +
                     path.string() + ": " + errno_text());
  }
  auto fail = [&](const std::string& step) {
    const std::string cause = errno_text();
    ::unlink(temporary.c_str());
    throw UsageError("cannot write " + path.string() + " (" + step + "): " + cause);
  };
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t wrote = ::write(file.get(), bytes.data() + done, bytes.size() - done);
    if (wrote < 0 && errno == EINTR) {
      continue;
    }
    if (wrote <= 0) {
      fail("write");
    }
    done += static_cast<size_t>(wrote);
  }
  // mkstemp makes the file 0600; a written result is as readable as any file the user makes.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  if (::fchmod(file.get(), 0666 & ~mask) != 0 || ::fsync(file.get()) != 0) {
    fail("flush");
  }
  if (!file.close()) {
    fail("close");
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    fail("rename");
  }
}

}  // namespace fusedops_app
