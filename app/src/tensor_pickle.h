// A bounds check of a torch.save(tensor) pickle before libtorch's unpickler sees it.
//
// Why: libtorch's C++ unpickler allocates what a length field says before it reads (a
// BINUNICODE of 4 GiB: a 1.6 KB file made the app take 4.5 GB, the fuzzer's second finding)
// and grows its memo table to the index an opcode names. This is not a second unpickler: it
// builds nothing, and accepts only the opcodes torch.save and torch::pickle_save write for
// one tensor, each argument within the pickle and within small bounds.
#pragma once

#include <string>
#include <string_view>

namespace fusedops_app {

// Throws UsageError naming source, the opcode and its offset, for an opcode a tensor pickle
// does not use, an argument that runs past the end, a string or memo index beyond the bounds
// a tensor's pickle needs, or no STOP at the end.
void check_tensor_pickle(std::string_view pickle, const std::string& source);

}  // namespace fusedops_app
