#include "zip_reader.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <set>

#include "app_error.h"
#include "printable.h"

namespace fusedops_app {

ZipReader::ZipReader(const std::vector<char>& bytes, std::string context)
    : context_(std::move(context)) {
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* data = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &error);
  if (data != nullptr) {
    // ZIP_CHECKCONS: also compare the central directory with each local header.
    archive_ = zip_open_from_source(data, ZIP_RDONLY | ZIP_CHECKCONS, &error);
    if (archive_ == nullptr) {
      zip_source_free(data);
    }
  }
  if (archive_ == nullptr) {
    const std::string cause = zip_error_strerror(&error);
    zip_error_fini(&error);
    fail(fmt::format("not a readable zip archive ({})", cause));
  }
  zip_error_fini(&error);
  try {
    refuse_impossible_sizes();
  } catch (...) {
    zip_discard(archive_);  // a constructor that throws runs no destructor
    throw;
  }
}

ZipReader::~ZipReader() {
  if (archive_ != nullptr) {
    zip_discard(archive_);
  }
}

zip_uint64_t ZipReader::size() const {
  const zip_int64_t entries = zip_get_num_entries(archive_, 0);
  return entries < 0 ? 0 : static_cast<zip_uint64_t>(entries);
}

std::string ZipReader::name(zip_uint64_t index) const {
  const char* name = zip_get_name(archive_, index, ZIP_FL_ENC_RAW);
  if (name == nullptr) {
    fail(fmt::format("entry {} has no readable name", index));
  }
  return name;
}

zip_uint64_t ZipReader::unpacked_size(zip_uint64_t index) const {
  zip_stat_t stat;
  zip_stat_init(&stat);
  if (zip_stat_index(archive_, index, 0, &stat) != 0 || (stat.valid & ZIP_STAT_SIZE) == 0) {
    fail(fmt::format("cannot read the size of entry {}", printable(name(index))));
  }
  return stat.size;
}

mode_t ZipReader::file_type(zip_uint64_t index) const {
  zip_uint8_t system = 0;
  zip_uint32_t attributes = 0;
  if (zip_file_get_external_attributes(archive_, index, 0, &system, &attributes) != 0) {
    fail(fmt::format("cannot read the attributes of entry {}", printable(name(index))));
  }
  return system == ZIP_OPSYS_UNIX ? static_cast<mode_t>((attributes >> 16) & S_IFMT) : 0;
}

void ZipReader::read(zip_uint64_t index,
                     const std::function<void(const char*, size_t)>& sink) const {
  const zip_uint64_t stated = unpacked_size(index);
  zip_file_t* file = zip_fopen_index(archive_, index, 0);
  if (file == nullptr) {
    fail(fmt::format("cannot open entry {}: {}", printable(name(index)), zip_strerror(archive_)));
  }
  // One byte past the stated size is enough to see an entry holding more.
  std::vector<char> buffer(std::min<zip_uint64_t>(stated + 1, 1 << 20));
  zip_uint64_t total = 0;
  try {
    for (;;) {
      const zip_int64_t got = zip_fread(file, buffer.data(), buffer.size());
      if (got < 0) {
        fail(fmt::format("cannot read entry {}: {}", printable(name(index)),
                         zip_file_strerror(file)));
      }
      if (got == 0) {
        break;
      }
      if (static_cast<zip_uint64_t>(got) > stated - total) {
        fail(fmt::format("entry {} holds more than the {} bytes its directory says",
                         printable(name(index)), stated));
      }
      total += static_cast<zip_uint64_t>(got);
      sink(buffer.data(), static_cast<size_t>(got));
    }
  } catch (...) {
    zip_fclose(file);
    throw;
  }
  if (zip_fclose(file) != 0) {
    fail(fmt::format("entry {} is damaged: {}", printable(name(index)), zip_strerror(archive_)));
  }
  if (total != stated) {
    fail(fmt::format("entry {} holds {} bytes, its directory says {}", printable(name(index)),
                     total, stated));
  }
}

zip_uint64_t ZipReader::counted_size(zip_uint64_t index) const {
  read(index, [](const char*, size_t) {});
  return unpacked_size(index);
}

std::string ZipReader::top_folder() const {
  if (size() == 0) {
    fail("the archive is empty");
  }
  const std::string first = name(0);
  const size_t slash = first.find('/');
  if (slash == std::string::npos || slash == 0) {
    fail(fmt::format("entry '{}' is not in a top folder, where torch writes every entry",
                     printable(first)));
  }
  const std::string folder = first.substr(0, slash + 1);
  std::set<std::string> seen;
  for (zip_uint64_t index = 0; index < size(); ++index) {
    const std::string entry = name(index);
    const bool is_folder_entry = !entry.empty() && entry.back() == '/';
    const std::string path = is_folder_entry ? entry.substr(0, entry.size() - 1) : entry;
    if (!seen.insert(path).second) {
      fail(fmt::format("entry '{}' appears twice", printable(entry)));
    }
    if (path.rfind(folder, 0) != 0) {
      fail(fmt::format("entry '{}' is outside the archive's top folder '{}'", printable(entry),
                       printable(folder)));
    }
  }
  return folder;
}

void ZipReader::refuse_impossible_sizes() const {
  // Deflate codes at most 258 bytes in a match of at least 2 bits: 1032 bytes per stored byte.
  constexpr zip_uint64_t kDeflateMaxRatio = 1032;
  for (zip_uint64_t index = 0; index < size(); ++index) {
    zip_stat_t stat;
    zip_stat_init(&stat);
    constexpr zip_uint64_t kNeeded = ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE | ZIP_STAT_COMP_METHOD;
    if (zip_stat_index(archive_, index, 0, &stat) != 0 || (stat.valid & kNeeded) != kNeeded) {
      fail(fmt::format("cannot read the sizes of entry {}", printable(name(index))));
    }
    const bool possible =
        stat.comp_method == ZIP_CM_STORE     ? stat.size == stat.comp_size
        : stat.comp_method == ZIP_CM_DEFLATE ? stat.size / kDeflateMaxRatio <= stat.comp_size
                                             : false;
    if (!possible) {
      fail(fmt::format("entry {} says it unpacks to {} bytes from {} bytes {}: the archive is "
                       "damaged",
                       printable(name(index)), stat.size, stat.comp_size,
                       stat.comp_method == ZIP_CM_STORE     ? "stored"
                       : stat.comp_method == ZIP_CM_DEFLATE ? "deflated"
                                                            : "in an unsupported method"));
    }
  }
}

void ZipReader::fail(const std::string& what) const {
  throw UsageError(fmt::format("{}: {}", context_, what));
}

}  // namespace fusedops_app
