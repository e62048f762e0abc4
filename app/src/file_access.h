// The app's one rule for touching files, whichever command and whichever file (a model, a
// manifest, config.pbtxt, a tensor file, --output):
// - A file is opened without blocking (O_NONBLOCK: a FIFO opens at once instead of waiting for
//   a writer that may never come) and its type is read from the open descriptor (fstat) before
//   a byte is read: anything but a regular file is refused, naming what is there.
// - Its size is read from that descriptor and compared with what the caller expects (a
//   manifest's entry, a limit) before the file is read, so that a huge or sparse file costs
//   nothing; it is read whole, once (the bytes checked are the bytes used).
// - A file of a model folder must resolve (through links) inside the folder it belongs to.
// - A file is written to a temporary file next to it and renamed into place, and only a
//   regular file or nothing is replaced: never a device, FIFO, socket, folder or symbolic link
//   (renaming over a link replaces the link, not its target; over /dev/null, the device).
// - The files of one model folder that one command reads together are read while it stays one
//   folder (read_consistently): an export replaces a model folder by exchanging it with a new
//   one, and a read that straddled the exchange is done again.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace fusedops_app {

// What a bounded read is about, for its messages: "tensor file", "model file", ...
struct ReadLimit {
  std::uintmax_t max_bytes;
  std::string what;
  // The option that raises the limit ("--max-tensor-file-mib"); empty when there is none.
  std::string option;
};

// A regular file opened for reading (the rule above), closed when it goes out of scope.
class RegularFile {
 public:
  // Throws UsageError for a missing or unreadable path, and for anything but a regular file
  // ("<path> is a FIFO (named pipe); expected a tensor file").
  static RegularFile open(const std::filesystem::path& path, const std::string& what);
  RegularFile(RegularFile&& other) noexcept;
  RegularFile& operator=(RegularFile&&) = delete;
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  ~RegularFile();

  const std::filesystem::path& path() const { return path_; }
  // The size when it was opened.
  std::uintmax_t size() const { return size_; }

  // The whole file. Throws UsageError when it is larger than the limit (before reading:
  // "<path> is 3221225472 bytes, more than the 1073741824-byte limit for a tensor file (raise it
  // with --max-tensor-file-mib)"), when its bytes cannot be held in memory, or when it changes
  // size while being read.
  std::vector<char> read_all(const ReadLimit& limit);

 private:
  RegularFile(int fd, std::filesystem::path path, std::uintmax_t size);
  int fd_;
  std::filesystem::path path_;
  std::uintmax_t size_;
};

// RegularFile::open(path, limit.what).read_all(limit).
std::vector<char> read_file_bounded(const std::filesystem::path& path, const ReadLimit& limit);

// What is at path itself (a final symbolic link is not followed): "a regular file", "a
// symbolic link", "a FIFO (named pipe)", "a character device", ...; nullopt when nothing is.
// Throws UsageError when path cannot be examined.
std::optional<std::string> what_is_at(const std::filesystem::path& path);

// Throws UsageError unless path resolves (through links) inside root, which is canonical. A
// path that does not exist is accepted (its reader reports it missing). allow_outside skips
// the check (--allow-external-symlinks).
void check_inside(const std::filesystem::path& path, const std::filesystem::path& root,
                  bool allow_outside);

// What write_file_atomically may find at its target.
enum class ExistingFile {
  kKeep,     // nothing may be there: an existing file is refused
  kReplace,  // a regular file there is replaced (--force)
};

// Throws UsageError unless path may be written under that rule: nothing there, or a regular
// file and kReplace. option names the path in messages ("--output").
void check_writable(const std::filesystem::path& path, ExistingFile existing,
                    const std::string& option);

// Writes bytes to a new temporary file in path's folder, flushes it to disk and renames it to
// path (check_writable's rule, applied again at the rename: with kKeep the rename itself
// refuses a file that appeared meanwhile), so that a reader sees the old file or the new one,
// never a part; a failure leaves what was there as it was and no temporary file behind.
// Throws UsageError naming path and the cause.
void write_file_atomically(const std::filesystem::path& path, const std::vector<char>& bytes,
                           ExistingFile existing, const std::string& option);

// What identifies the folder at a path now: its device, inode and status-change time. An
// export replaces a model folder by exchanging it with a complete new one
// (scripted/model_folder.py: renameat2 RENAME_EXCHANGE, then the old one removed), which changes
// them; a file rewritten inside it does not. Equal to another only when both could be read.
struct FolderIdentity {
  dev_t device = 0;
  ino_t inode = 0;
  int64_t changed_ns = 0;
  bool read = false;
  bool operator==(const FolderIdentity& other) const {
    return read && other.read && device == other.device && inode == other.inode &&
           changed_ns == other.changed_ns;
  }
  bool operator!=(const FolderIdentity& other) const { return !(*this == other); }
};
FolderIdentity folder_identity(const std::filesystem::path& folder);

[[noreturn]] void throw_folder_kept_changing(const std::filesystem::path& folder);

// How often read_consistently reads a folder that keeps being replaced before it gives up.
inline constexpr int kMaxFolderReadAttempts = 5;

// Runs read(), which reads files of folder one after another by path, until one run happened
// while the path named one folder throughout, and returns what that run returned (or throws
// what it threw): a run that straddled an export's exchange of the folder, and saw some files
// of the old folder and some of the new, or a file the export had just removed, is discarded
// and done again. So a reader gets the old folder's files or the new one's, never a mix
// (issue 36: `check` during a re-export said "sample_input.pt has SHA-256 X, the manifest says
// Y" in 17 of 91 runs). Throws UsageError when the folder was replaced during each of
// kMaxFolderReadAttempts runs.
template <typename Read>
auto read_consistently(const std::filesystem::path& folder, Read&& read) -> decltype(read()) {
  for (int attempt = 1;; ++attempt) {
    const FolderIdentity before = folder_identity(folder);
    bool replaced = false;
    try {
      auto result = read();
      replaced = folder_identity(folder) != before;
      if (!replaced) return result;
    } catch (...) {
      replaced = before.read && folder_identity(folder) != before;
      if (!replaced || attempt == kMaxFolderReadAttempts) throw;
    }
    if (attempt == kMaxFolderReadAttempts) {
      throw_folder_kept_changing(folder);
    }
  }
}

// The folder temporary files go into: $TMPDIR, or /tmp when it is unset or empty (POSIX: an
// empty TMPDIR is no TMPDIR). Throws UsageError when it is not a folder.
std::filesystem::path temporary_folder();

}  // namespace fusedops_app
