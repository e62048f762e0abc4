#include "tensor_io.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <c10/core/CPUAllocator.h>
#include <caffe2/serialize/versions.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <string_view>
#include <tuple>

#include "app_error.h"
#include "file_access.h"
#include "model_metadata.h"
#include "printable.h"
#include "tensor_pickle.h"
#include "zip_reader.h"

namespace fusedops_app {

namespace {

// Element count of a view's reach into its storage: storage_offset + sum((size - 1) * stride)
// + 1, or nullopt when a size or stride is negative or the arithmetic overflows int64.
std::optional<int64_t> storage_elements_reached(const at::Tensor& tensor) {
  int64_t reach = tensor.storage_offset();
  if (reach < 0) {
    return std::nullopt;
  }
  for (int64_t d = 0; d < tensor.dim(); ++d) {
    const int64_t size = tensor.size(d);
    const int64_t stride = tensor.stride(d);
    if (size < 0 || stride < 0) {
      return std::nullopt;
    }
    if (size == 0) {
      return 0;  // no element, nothing read
    }
    int64_t step = 0;
    if (__builtin_mul_overflow(size - 1, stride, &step) ||
        __builtin_add_overflow(reach, step, &reach)) {
      return std::nullopt;
    }
  }
  int64_t elements = 0;
  if (__builtin_add_overflow(reach, int64_t{1}, &elements)) {
    return std::nullopt;
  }
  return elements;
}

// The C++ unpickler builds a tensor from the sizes, strides and offset the pickle states, and
// a storage of the size the pickle states, over the record it read, without comparing any of
// them with the record's size (Python's torch.load does): a file cut short, or one lying about
// its shape, would be read past the end of its buffer.
void check_tensor_fits_its_storage(const at::Tensor& tensor, const std::string& source,
                                   uint64_t record_bytes, std::uintmax_t max_bytes) {
  const std::string described = fmt::format(
      "{}: the tensor's shape {} (strides [{}], storage offset {}) of {}", source,
      shape_text(tensor.sizes()), fmt::join(tensor.strides(), ", "), tensor.storage_offset(),
      c10::toString(tensor.scalar_type()));
  const auto elements = storage_elements_reached(tensor);
  if (!elements) {
    throw UsageError(described + " has a negative or overflowing extent");
  }
  const auto item_bytes = static_cast<int64_t>(tensor.element_size());
  int64_t needed_bytes = 0;
  int64_t numel_bytes = 0;
  if (__builtin_mul_overflow(*elements, item_bytes, &needed_bytes) ||
      __builtin_mul_overflow(tensor.numel(), item_bytes, &numel_bytes)) {
    throw UsageError(described + " overflows int64 bytes");
  }
  // The unpickler sizes the storage from the pickle's element count, not from the record it
  // read: the record is what the file holds.
  const auto storage_bytes =
      std::min(static_cast<int64_t>(tensor.storage().nbytes()), static_cast<int64_t>(record_bytes));
  if (needed_bytes > storage_bytes) {
    throw UsageError(fmt::format("{} needs {} bytes of storage, the file holds {}: the file is "
                                 "cut short or its shape is wrong",
                                 described, needed_bytes, storage_bytes));
  }
  // An expanded view (stride 0) fits a small storage but becomes numel values when copied.
  if (static_cast<std::uintmax_t>(numel_bytes) > max_bytes) {
    throw UsageError(fmt::format("{} is {} bytes of values, more than the {}-byte limit for a "
                                 "tensor file",
                                 described, numel_bytes, max_bytes));
  }
}

bool is_floating_dtype_we_read(at::ScalarType dtype) {
  return dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16 ||
         dtype == at::kDouble;
}

// The records of a torch.save archive that reading one tensor needs, found by name under the
// archive's one top folder ("archive/", any name), as libtorch's reader finds them.
struct TensorArchiveRecords {
  std::optional<zip_uint64_t> pickle;     // data.pkl
  std::optional<zip_uint64_t> version;    // .data/version, else version
  std::optional<zip_uint64_t> byteorder;  // byteorder
  std::vector<std::pair<std::string, zip_uint64_t>> storages;  // data/<key>
};

TensorArchiveRecords find_records(const ZipReader& zip, const std::string& source,
                                  std::uintmax_t max_bytes) {
  TensorArchiveRecords records;
  const std::string prefix = zip.top_folder();
  std::optional<zip_uint64_t> plain_version;
  uint64_t stated_bytes = 0;  // what every record's directory entry says it unpacks to
  for (zip_uint64_t index = 0; index < zip.size(); ++index) {
    const std::string name = zip.name(index);
    const std::string record = name.substr(prefix.size());
    if (record == "constants.pkl" || record.rfind("code/", 0) == 0) {
      throw UsageError(fmt::format(
          "{} is a TorchScript archive (torch.jit.save), not a tensor: the app does not load "
          "code from a data file. Tensor files are torch.save(tensor) (scripted/export.py "
          "writes them so since its manifest format 1; re-export an older repository)",
          source));
    }
    const zip_uint64_t stated = zip.unpacked_size(index);
    if (stated > max_bytes || stated_bytes > max_bytes - stated) {
      throw UsageError(fmt::format("{}: its records unpack to more than the {}-byte limit for "
                                   "a tensor file (entry '{}' alone says {} bytes)",
                                   source, max_bytes, printable(name), stated));
    }
    stated_bytes += stated;
    if (record == "data.pkl") {
      records.pickle = index;
    } else if (record == ".data/version") {
      records.version = index;
    } else if (record == "version") {
      plain_version = index;
    } else if (record == "byteorder") {
      records.byteorder = index;
    } else if (record.rfind("data/", 0) == 0) {
      records.storages.emplace_back(record.substr(5), index);
    }
  }
  if (!records.version) {
    records.version = plain_version;
  }
  return records;
}

// A small text record (version, byteorder) whole; one stating more than at_most is refused.
std::string read_short_record(const ZipReader& zip, zip_uint64_t index, zip_uint64_t at_most) {
  if (zip.unpacked_size(index) > at_most) {
    zip.fail(fmt::format("entry {} says it holds {} bytes; it is a few bytes of text in a "
                         "torch.save file",
                         printable(zip.name(index)), zip.unpacked_size(index)));
  }
  std::string text;
  zip.read(index, [&](const char* data, size_t n) { text.append(data, n); });
  return text;
}

// The archive's format version, checked as libtorch's reader checks it: the unpickler reads
// container type tags differently below version 3.
uint64_t read_format_version(const ZipReader& zip, const TensorArchiveRecords& records) {
  if (!records.version) {
    zip.fail("no version record: not a torch.save archive");
  }
  std::string text = read_short_record(zip, *records.version, 32);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.pop_back();
  }
  uint64_t version = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), version);
  if (error != std::errc() || end != text.data() + text.size() ||
      version < caffe2::serialize::kMinSupportedFileFormatVersion ||
      version > caffe2::serialize::kMaxSupportedFileFormatVersion) {
    zip.fail(fmt::format("its format version '{}' is not one this libtorch reads ({} to {})",
                         printable(text), caffe2::serialize::kMinSupportedFileFormatVersion,
                         caffe2::serialize::kMaxSupportedFileFormatVersion));
  }
  return version;
}

// The storage record's bytes in memory of their own, taken only once they are counted: the
// directory's size is a claim, and a few bytes of deflate can claim a gigabyte.
at::DataPtr read_storage(const ZipReader& zip, zip_uint64_t index) {
  const zip_uint64_t bytes = zip.counted_size(index);
  at::DataPtr storage = c10::GetCPUAllocator()->allocate(bytes);
  char* to = static_cast<char*>(storage.get());
  zip.read(index, [&](const char* data, size_t n) {  // at most `bytes` in all (zip_reader.h)
    std::memcpy(to, data, n);
    to += n;
  });
  return storage;
}

}  // namespace

at::Tensor tensor_from_bytes(const std::vector<char>& bytes, const std::string& source,
                             std::uintmax_t max_bytes) {
  if (bytes.size() > max_bytes) {
    throw UsageError(fmt::format("{} is {} bytes, more than the {}-byte limit for a tensor file",
                                 source, bytes.size(), max_bytes));
  }
  // Every record is found and its stated size bounded before any is read; a TorchScript
  // archive (code/, constants.pkl) gets a message of its own and is never loaded, since
  // loading one runs the code it holds.
  const ZipReader zip(bytes, fmt::format("cannot read a tensor from {}", source));
  const TensorArchiveRecords records = find_records(zip, source, max_bytes);
  // torch.save of one tensor (or a view of one) writes one storage.
  if (records.storages.size() != 1) {
    throw UsageError(fmt::format("{} holds {} tensor storages; expected the one of a "
                                 "torch.save(tensor) file",
                                 source, records.storages.size()));
  }
  if (!records.pickle) {
    zip.fail("no data.pkl: not a torch.save archive");
  }
  if (records.byteorder) {
    const std::string order = read_short_record(zip, *records.byteorder, 16);
    if (order != "little") {
      zip.fail(fmt::format("its values are stored in byte order '{}'; the app reads "
                           "little-endian files (torch.save on x86 and ARM writes them)",
                           printable(order)));
    }
  }
  const uint64_t version = read_format_version(zip, records);

  std::string pickle;
  zip.read(*records.pickle, [&](const char* data, size_t n) { pickle.append(data, n); });
  check_tensor_pickle(pickle, source);

  const std::string& storage_key = records.storages.front().first;
  const zip_uint64_t storage_index = records.storages.front().second;
  const zip_uint64_t storage_bytes = zip.unpacked_size(storage_index);
  at::DataPtr storage = read_storage(zip, storage_index);
  bool storage_taken = false;
  c10::IValue value;
  try {
    // What torch::pickle_load does, on the CPU: no type resolver and no object loader, so a
    // pickle naming a TorchScript class or anything but tensors and containers is an error.
    size_t pickle_read = 0;
    auto reader = [&](char* buffer, size_t n) -> size_t {
      const size_t available = std::min(n, pickle.size() - pickle_read);
      std::memcpy(buffer, pickle.data() + pickle_read, available);
      pickle_read += available;
      return available;
    };
    auto read_record = [&](const std::string& key) -> at::DataPtr {
      if (key != storage_key || storage_taken) {
        throw UsageError(fmt::format("{}: its pickle asks for storage '{}', the file holds one "
                                     "storage '{}' (read once)",
                                     source, printable(key), printable(storage_key)));
      }
      storage_taken = true;
      return std::move(storage);
    };
    torch::jit::Unpickler unpickler(reader, /*type_resolver=*/nullptr, /*obj_loader=*/nullptr,
                                    read_record, at::Device(at::kCPU));
    unpickler.set_version(version);
    value = unpickler.parse_ivalue();
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {
    throw UsageError(fmt::format("cannot read a tensor from {}: {}", source,
                                 torch_error_message(e)));
  }
  if (!value.isTensor()) {
    throw UsageError(fmt::format("{} holds a {}, not a tensor (expected torch.save(tensor))",
                                 source, value.tagKind()));
  }
  const at::Tensor tensor = value.toTensor();
  if (tensor.layout() != at::kStrided || tensor.is_quantized() || !tensor.has_storage()) {
    throw UsageError(fmt::format("{} holds a {} tensor; expected a dense (strided) one", source,
                                 c10::toString(tensor.layout())));
  }
  if (!is_floating_dtype_we_read(tensor.scalar_type())) {
    throw UsageError(fmt::format("{} holds a tensor of dtype {}; expected float32, float16, "
                                 "bfloat16 or float64",
                                 source, c10::toString(tensor.scalar_type())));
  }
  check_tensor_fits_its_storage(tensor, source, storage_bytes, max_bytes);
  // A copy: its storage is exactly its values, not the file's storage with a size the file
  // stated.
  return tensor.cpu().clone(at::MemoryFormat::Contiguous);
}

at::Tensor load_tensor_file(const std::filesystem::path& path, std::uintmax_t max_bytes) {
  const std::vector<char> bytes =
      read_file_bounded(path, {max_bytes, "tensor file", kMaxTensorFileOption});
  return tensor_from_bytes(bytes, path.string(), max_bytes);
}

void save_tensor_file(const at::Tensor& tensor, const std::filesystem::path& path,
                      ExistingFile existing, const std::string& option) {
  write_file_atomically(path, torch::jit::pickle_save(tensor.detach().cpu()), existing, option);
}

std::string shape_text(c10::IntArrayRef shape) {
  return fmt::format("[{}]", fmt::join(shape.begin(), shape.end(), ", "));
}

std::string summarize_tensor(const at::Tensor& tensor, int64_t first_values) {
  const at::Tensor values = tensor.detach().to(at::kCPU, at::kDouble).flatten();
  std::string text = fmt::format("shape {}, dtype {}, device {}\n", shape_text(tensor.sizes()),
                                 dtype_name(tensor.scalar_type()), tensor.device().str());
  const at::Tensor finite = values.masked_select(values.isfinite());
  if (finite.numel() > 0) {
    text += fmt::format("min {:.6g}, max {:.6g}, mean {:.6g}", finite.min().item<double>(),
                        finite.max().item<double>(), finite.mean().item<double>());
  } else {
    text += "no finite values";
  }
  if (finite.numel() != values.numel()) {
    text += fmt::format(" ({} of {} values are inf or NaN)", values.numel() - finite.numel(),
                        values.numel());
  }
  const int64_t shown = std::min(first_values, values.numel());
  const at::Tensor head = values.slice(0, 0, shown).contiguous();
  const double* data = head.data_ptr<double>();
  text += fmt::format("\nfirst {} values: [{:.6g}]", shown, fmt::join(data, data + shown, ", "));
  return text;
}

Comparison compare_to_reference(const at::Tensor& output, const at::Tensor& reference,
                                const Tolerance& tolerance,
                                const std::optional<at::Tensor>& reference_float64) {
  Comparison result;
  result.output_shape = output.sizes().vec();
  result.reference_shape = reference.sizes().vec();
  result.output_dtype = output.scalar_type();
  result.reference_dtype = reference.scalar_type();
  result.shapes_match = output.sizes() == reference.sizes();
  result.dtypes_match = output.scalar_type() == reference.scalar_type();
  result.elements = reference.numel();
  if (!result.shapes_match || result.elements == 0) {
    return result;
  }
  const at::Tensor got = output.detach().to(at::kCPU, at::kDouble);
  const at::Tensor expected = reference.detach().to(at::kCPU, at::kDouble);
  const at::Tensor abs_error = (got - expected).abs();
  const at::Tensor allowed = tolerance.atol + tolerance.rtol * expected.abs();
  at::Tensor within = fusedops::accuracy::within_tolerance(got, expected, tolerance);
  if (reference_float64 && reference_float64->sizes() == reference.sizes()) {
    const at::Tensor with_float64 =
        fusedops::accuracy::within_tolerance(got, expected, tolerance, reference_float64);
    result.within_float64_only = (with_float64 & within.logical_not()).sum().item<int64_t>();
    within = with_float64;
  }
  result.mismatches = result.elements - within.sum().item<int64_t>();
  result.max_abs_error = abs_error.max().item<double>();
  result.max_rel_error =
      (abs_error / expected.abs().clamp_min(std::numeric_limits<double>::min())).max().item<double>();
  result.tolerance_used =
      (abs_error / allowed.clamp_min(std::numeric_limits<double>::min())).max().item<double>();

  at::Tensor excess = at::where(abs_error.isnan(),
                                at::full({}, std::numeric_limits<double>::infinity(),
                                         abs_error.options()),
                                abs_error - allowed);
  // The worst element is a real mismatch when there is one.
  if (result.mismatches > 0) {
    excess = at::where(within, at::full({}, -std::numeric_limits<double>::infinity(),
                                        excess.options()),
                       excess);
  }
  int64_t flat = excess.flatten().argmax().item<int64_t>();
  result.worst_value = got.flatten()[flat].item<double>();
  result.worst_expected = expected.flatten()[flat].item<double>();
  result.worst_index.assign(static_cast<size_t>(reference.dim()), 0);
  for (int64_t d = reference.dim() - 1; d >= 0; --d) {
    result.worst_index[static_cast<size_t>(d)] = flat % reference.size(d);
    flat /= reference.size(d);
  }
  return result;
}

std::string Comparison::describe(const Tolerance& tolerance) const {
  if (!shapes_match) {
    return fmt::format("output shape {} differs from the reference's {}",
                       shape_text(output_shape), shape_text(reference_shape));
  }
  if (!dtypes_match) {
    return fmt::format("output dtype {} differs from the reference's {}",
                       dtype_name(output_dtype), dtype_name(reference_dtype));
  }
  std::string text = fmt::format(
      "max_abs_err {:.3g}, at most {:.3g} of the tolerance atol + rtol * |ref| (atol {:g}, "
      "rtol {:g})",
      max_abs_error, tolerance_used, tolerance.atol, tolerance.rtol);
  if (mismatches > 0) {
    text += fmt::format("; {} of {} elements outside the tolerance, worst at [{}]: got {:.8g}, "
                        "expected {:.8g}",
                        mismatches, elements, fmt::join(worst_index, ", "), worst_value,
                        worst_expected);
  }
  if (within_float64_only > 0) {
    text += fmt::format("; {} element(s) outside the tolerance of the float32 reference but "
                        "within it of the float64 reference",
                        within_float64_only);
  }
  return text;
}

}  // namespace fusedops_app
