#include "tensor_pickle.h"

#include <fmt/format.h>

#include <cstdint>

#include "app_error.h"

namespace fusedops_app {

namespace {

// The strings of a tensor pickle are module and class names, a storage key and a device.
constexpr uint64_t kMaxString = 4096;
// A tensor pickle memoizes a dozen values.
constexpr uint64_t kMaxMemoIndex = 4096;
constexpr size_t kMaxOpcodes = 1 << 16;

// How an opcode's argument is laid out (Python's pickletools names).
enum class Argument {
  kNone,
  kUint1,           // BININT1, BINPUT, BINGET, PROTO
  kUint2,           // BININT2
  kInt4,            // BININT
  kMemo4,           // LONG_BINPUT, LONG_BINGET
  kFloat8,          // BINFLOAT
  kLong1,           // LONG1: a 1-byte length, then that many bytes
  kUnicode4,        // BINUNICODE: a 4-byte length, then UTF-8
  kUnicode1,        // SHORT_BINUNICODE: a 1-byte length, then UTF-8
  kTwoLines,        // GLOBAL: "module\nname\n"
};

// Every opcode torch.save (protocol 2) and torch::pickle_save write for a tensor.
bool argument_of(unsigned char opcode, Argument& argument) {
  switch (opcode) {
    case 0x80: argument = Argument::kUint1; return true;      // PROTO
    case 'c': argument = Argument::kTwoLines; return true;    // GLOBAL
    case 'q': case 'h': argument = Argument::kUint1; return true;  // BINPUT, BINGET
    case 'r': case 'j': argument = Argument::kMemo4; return true;  // LONG_BINPUT, LONG_BINGET
    case 'K': argument = Argument::kUint1; return true;       // BININT1
    case 'M': argument = Argument::kUint2; return true;       // BININT2
    case 'J': argument = Argument::kInt4; return true;        // BININT
    case 0x8a: argument = Argument::kLong1; return true;      // LONG1
    case 'G': argument = Argument::kFloat8; return true;      // BINFLOAT
    case 'X': argument = Argument::kUnicode4; return true;    // BINUNICODE
    case 0x8c: argument = Argument::kUnicode1; return true;   // SHORT_BINUNICODE
    case '(': case 't': case 0x85: case 0x86: case 0x87:      // MARK, TUPLE, TUPLE1-3
    case ')': case ']': case '}':                             // EMPTY_TUPLE/LIST/DICT
    case 'a': case 'e': case 's': case 'u':                   // APPEND(S), SETITEM(S)
    case 'R': case 'Q':                                       // REDUCE, BINPERSID
    case 0x88: case 0x89: case 'N':                           // NEWTRUE, NEWFALSE, NONE
    case '.':                                                 // STOP
      argument = Argument::kNone;
      return true;
    default:
      return false;
  }
}

uint64_t little_endian(std::string_view bytes) {
  uint64_t value = 0;
  for (size_t i = bytes.size(); i-- > 0;) {
    value = (value << 8) | static_cast<unsigned char>(bytes[i]);
  }
  return value;
}

}  // namespace

void check_tensor_pickle(std::string_view pickle, const std::string& source) {
  size_t at = 0;
  for (size_t opcodes = 0; opcodes < kMaxOpcodes; ++opcodes) {
    if (at >= pickle.size()) {
      break;
    }
    const auto opcode = static_cast<unsigned char>(pickle[at]);
    const size_t opcode_at = at++;
    auto fail = [&](const std::string& why) {
      throw UsageError(fmt::format("{}: the tensor's pickle is not what torch.save(tensor) "
                                   "writes: opcode 0x{:02x} at byte {} {}",
                                   source, opcode, opcode_at, why));
    };
    auto take = [&](uint64_t count) {
      if (count > pickle.size() - at) {
        fail(fmt::format("needs {} bytes, {} remain", count, pickle.size() - at));
      }
      const std::string_view bytes = pickle.substr(at, count);
      at += count;
      return bytes;
    };
    Argument argument = Argument::kNone;
    if (!argument_of(opcode, argument)) {
      fail("is not one a tensor's pickle uses");
    }
    switch (argument) {
      case Argument::kNone: break;
      case Argument::kUint1: take(1); break;
      case Argument::kUint2: take(2); break;
      case Argument::kInt4: take(4); break;
      case Argument::kFloat8: take(8); break;
      case Argument::kMemo4:
        if (little_endian(take(4)) > kMaxMemoIndex) {
          fail(fmt::format("names memo entry above {}", kMaxMemoIndex));
        }
        break;
      case Argument::kLong1: {
        const uint64_t length = little_endian(take(1));
        if (length > 8) {
          fail("holds an integer wider than 64 bits");
        }
        take(length);
        break;
      }
      case Argument::kUnicode4:
      case Argument::kUnicode1: {
        const uint64_t length =
            little_endian(take(argument == Argument::kUnicode4 ? 4 : 1));
        if (length > kMaxString) {
          fail(fmt::format("holds a string of {} bytes (at most {} in a tensor's pickle)",
                           length, kMaxString));
        }
        take(length);
        break;
      }
      case Argument::kTwoLines:
        for (int line = 0; line < 2; ++line) {
          const size_t end = pickle.find('\n', at);
          if (end == std::string_view::npos || end - at > kMaxString) {
            fail("has a name that does not end within the pickle");
          }
          at = end + 1;
        }
        break;
    }
    if (opcode == '.') {
      if (at != pickle.size()) {
        fail(fmt::format("is followed by {} more bytes", pickle.size() - at));
      }
      return;
    }
  }
  throw UsageError(fmt::format("{}: the tensor's pickle does not end with STOP within {} "
                               "opcodes",
                               source, kMaxOpcodes));
}

}  // namespace fusedops_app
