// The app's readers of untrusted bytes, one by one (no exported repository needed): tensor
// files, manifests, names in a repository, Triton configs, the CPU check of a .pt2. The same
// functions are fuzzed (app/fuzz/); these tests pin the cases issue 14 found.
#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/torch.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "app_error.h"
#include "cpu_isa.h"
#include "file_access.h"
#include "manifest.h"
#include "model_metadata.h"
#include "printable.h"
#include "repository_layout.h"
#include "temporary_directory.h"
#include "tensor_io.h"
#include "triton_config.h"

using namespace fusedops_app;

namespace {

template <typename Statement>
void expect_usage_error(Statement statement, const std::string& needle) {
  try {
    statement();
    ADD_FAILURE() << "expected a UsageError containing: " << needle;
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message: " << e.what() << "\nshould contain: " << needle;
  }
}

// What scripted/export.py writes for model 98 at the small sizes, on the CPU.
const char* const kExportedConfig = R"(name: "fusedops_98_matmul_avgpool_gelu_scale_max"
platform: "pytorch_libtorch"
max_batch_size: 32
input [
  {
    name: "INPUT__0"
    data_type: TYPE_FP32
    dims: [ 256 ]
  }
]
output [
  {
    name: "OUTPUT__0"
    data_type: TYPE_FP32
    dims: [ 1 ]
    reshape: { shape: [ ] }
  }
]
# comment
instance_group [ { count: 1, kind: KIND_AUTO } ]
dynamic_batching { }
parameters: { key: "INFERENCE_MODE" value: { string_value: "true" } }
)";

TritonConfigExpectation model98_expectation() {
  TritonConfigExpectation expected;
  expected.model_name = "fusedops_98_matmul_avgpool_gelu_scale_max";
  expected.model_file = "model.pt";
  expected.platform = "pytorch_libtorch";
  expected.input = {"INPUT__0", "TYPE_FP32", {32, 256}};
  expected.output = {"OUTPUT__0", "TYPE_FP32", {32}};
  return expected;
}

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

}  // namespace

TEST(TensorFile, ReadsATorchSavedTensor) {
  const at::Tensor x = at::rand({4, 3});
  const auto bytes = torch::pickle_save(x);
  EXPECT_TRUE(at::equal(tensor_from_bytes(bytes, "x.pt"), x));
}

TEST(TensorFile, RefusesATensorLargerThanItsStorage) {
  // A file whose pickle claims 1000 elements over a storage of 2: what a file cut short (or
  // lying) looks like to the C++ unpickler, which builds the tensor without comparing.
  at::Tensor lying = at::zeros({2});
  lying.unsafeGetTensorImpl()->set_sizes_contiguous({1000});
  const auto bytes = torch::pickle_save(lying);
  expect_usage_error([&] { tensor_from_bytes(bytes, "short.pt"); },
                     "needs 4000 bytes of storage, the file holds 8");
}

TEST(TensorFile, RefusesAnOffsetPastTheStorage) {
  at::Tensor lying = at::zeros({4});
  const std::vector<int64_t> sizes{4}, strides{1};
  lying.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, /*storage_offset=*/3);
  expect_usage_error([&] { tensor_from_bytes(torch::pickle_save(lying), "offset.pt"); },
                     "needs 28 bytes of storage, the file holds 16");
}

TEST(TensorFile, RefusesAnExpandedViewLargerThanTheLimit) {
  const at::Tensor expanded = at::zeros({1}).expand({1 << 20});
  expect_usage_error(
      [&] { tensor_from_bytes(torch::pickle_save(expanded), "wide.pt", /*max_bytes=*/1 << 16); },
      "more than the 65536-byte limit");
}

TEST(TensorFile, RefusesIntegersAndNonTensors) {
  expect_usage_error([] { tensor_from_bytes(torch::pickle_save(at::zeros({2}, at::kLong)), "i.pt"); },
                     "dtype Long");
  expect_usage_error([] { tensor_from_bytes(torch::pickle_save(c10::IValue(3)), "n.pt"); },
                     "n.pt holds 0 tensor storages");
  expect_usage_error([] { tensor_from_bytes(std::vector<char>{'n', 'o'}, "text.pt"); },
                     "cannot read a tensor from text.pt");
}

TEST(TensorFile, RefusesAFileOverTheSizeLimit) {
  const auto bytes = torch::pickle_save(at::zeros({1024}));
  expect_usage_error([&] { tensor_from_bytes(bytes, "big.pt", /*max_bytes=*/1024); },
                     "more than the 1024-byte limit for a tensor file");
}

TEST(RepositoryLayout, VersionFoldersAreInt64) {
  EXPECT_EQ(parse_version_folder_name("1"), 1);
  EXPECT_EQ(parse_version_folder_name("9223372036854775807"), INT64_MAX);
  EXPECT_FALSE(parse_version_folder_name("9223372036854775808"));
  EXPECT_FALSE(parse_version_folder_name("99999999999999999999999"));
  EXPECT_FALSE(parse_version_folder_name(""));
  EXPECT_FALSE(parse_version_folder_name("1a"));
}

TEST(RepositoryLayout, SafeRelativeNames) {
  for (const char* good : {"config.pbtxt", "1/model.pt", "model/data/a.so"}) {
    EXPECT_TRUE(is_safe_relative_name(good)) << good;
  }
  for (const char* bad : {"", "/etc/passwd", "../x", "a/../b", "a//b", "./a", "a/", "a\\b",
                          "a\nb", "a/."}) {
    EXPECT_FALSE(is_safe_relative_name(bad)) << bad;
  }
}

TEST(Printable, EscapesControlCharacters) {
  EXPECT_EQ(printable("a\nPASS b"), "a\\nPASS b");
  EXPECT_EQ(printable("\x1b[2J\\"), "\\x1b[2J\\\\");
  EXPECT_EQ(printable("plain"), "plain");
}

TEST(Manifest, RefusesNamesOutsideTheFolderAndBadDigests) {
  const std::string digest(64, 'a');
  auto manifest = [&](const std::string& name, const std::string& sha) {
    return R"({"format": 1, "algorithm": "sha256", "files": {")" + name +
           R"(": {"sha256": ")" + sha + R"(", "bytes": 3}}})";
  };
  EXPECT_EQ(Manifest::parse(manifest("1/model.pt", digest), "m").files().size(), 1u);
  expect_usage_error([&] { Manifest::parse(manifest("../model.pt", digest), "m"); },
                     "not a relative path");
  expect_usage_error([&] { Manifest::parse(manifest("/etc/passwd", digest), "m"); },
                     "not a relative path");
  expect_usage_error([&] { Manifest::parse(manifest("a.pt", "ABC"), "m"); },
                     "expected 64 lowercase hex digits");
  expect_usage_error([&] { Manifest::parse("{", "m"); }, "not a manifest");
  expect_usage_error([&] { Manifest::parse(R"({"format": 9})", "m"); }, "format 9");
}

TEST(Manifest, Sha256) {
  EXPECT_EQ(sha256_hex("abc", 3),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(ModelMetadata, RefusesADtypeExportNeverWrites) {
  const std::string json = R"({"format": 2, "model_name": "m", "problem": "98", "name": "n",
    "op": "fusedops::x", "mode": "eval", "init_args": [], "device": "cpu", "seed": 0,
    "fusedops_version": "0", "torch_version": "0", "rows_independent": true,
    "input": {"shape": [32, 256], "dtype": "DTYPE"},
    "output": {"shape": [32], "dtype": "float32"}})";
  EXPECT_EQ(ModelMetadata::parse(replace(json, "DTYPE", "float32"), "m").input.dtype, at::kFloat);
  expect_usage_error([&] { ModelMetadata::parse(replace(json, "DTYPE", "int64"), "m"); },
                     "input dtype int64; scripted/export.py writes float32, float16 or bfloat16");
  const std::string zero_width = replace(replace(json, "DTYPE", "float32"), "[32, 256]", "[32, 0]");
  expect_usage_error([&] { ModelMetadata::parse(zero_width, "m"); }, "expected dimensions >= 1");
}

TEST(Manifest, RefusesARepeatedKey) {
  // nlohmann keeps the last of two equal keys: a file could say one thing to this app and
  // another to the next reader (issue 21).
  const std::string digest(64, 'a');
  const std::string entry = R"({"sha256": ")" + digest + R"(", "bytes": 3})";
  const std::string good =
      R"({"format": 1, "algorithm": "sha256", "files": {"a.pt": )" + entry + "}}";
  EXPECT_EQ(Manifest::parse(good, "m").files().size(), 1u);
  for (const auto& [repeated, key] :
       {std::pair<std::string, std::string>{replace(good, R"("format": 1,)",
                                                    R"("format": 1, "format": 1,)"),
                                            "format"},
        {replace(good, R"("files": {)", R"("files": {"a.pt": )" + entry + ","), "a.pt"},
        {replace(good, R"("bytes": 3)", R"("bytes": 4, "bytes": 3)"), "bytes"}}) {
    expect_usage_error([&] { Manifest::parse(repeated, "m"); },
                       "m: the key \"" + key + "\" appears twice in one object");
  }
}

TEST(ModelMetadata, RefusesARepeatedKey) {
  const std::string json = R"({"format": 2, "model_name": "m", "problem": "98", "name": "n",
    "op": "fusedops::x", "mode": "eval", "init_args": [], "device": "cpu", "seed": 0,
    "fusedops_version": "0", "torch_version": "0", "rows_independent": true,
    "input": {"shape": [32, 256], "dtype": "float32"},
    "output": {"shape": [32], "dtype": "float32"}})";
  EXPECT_EQ(ModelMetadata::parse(json, "m").op, "fusedops::x");
  expect_usage_error(
      [&] { ModelMetadata::parse(replace(json, R"("op": )", R"("op": "fusedops::y", "op": )"), "m"); },
      "the key \"op\" appears twice in one object");
}

TEST(FileAccess, ANonRegularFileIsRefusedWithoutBlocking) {
  // Opening a FIFO for reading waits for a writer: the app hung on one (issue 21).
  TemporaryDirectory scratch("test");
  const auto fifo = scratch.path() / "config.pbtxt";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_usage_error([&] { read_file_bounded(fifo, {1 << 20, "Triton config", ""}); },
                     fifo.string() + " is a FIFO (named pipe); expected a Triton config");
  expect_usage_error([&] { read_file_bounded("/dev/null", {1 << 20, "tensor file", ""}); },
                     "/dev/null is a character device; expected a tensor file");
  expect_usage_error([&] { read_file_bounded(scratch.path(), {1 << 20, "tensor file", ""}); },
                     "is a folder; expected a tensor file");
}

TEST(FileAccess, TheSizeIsKnownBeforeReading) {
  TemporaryDirectory scratch("test");
  const auto sparse = scratch.path() / "model.pt";
  std::ofstream(sparse) << "x";
  std::filesystem::resize_file(sparse, std::uintmax_t{3} << 29);
  RegularFile file = RegularFile::open(sparse, "model file");
  EXPECT_EQ(file.size(), std::uintmax_t{3} << 29);
  expect_usage_error([&] { file.read_all({1 << 20, "model file", ""}); },
                     "is 1610612736 bytes, more than the 1048576-byte limit for a model file");
}

TEST(FileAccess, OnlyARegularFileIsEverReplaced) {
  TemporaryDirectory scratch("test");
  const auto target = scratch.path() / "target";
  std::ofstream(target) << "precious";
  const auto link = scratch.path() / "link";
  std::filesystem::create_symlink(target, link);
  const auto fifo = scratch.path() / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const auto& [path, kind] : {std::pair<std::filesystem::path, std::string>{link, "a symbolic link"},
                                   {fifo, "a FIFO (named pipe)"},
                                   {"/dev/null", "a character device"},
                                   {scratch.path(), "a folder"}}) {
    for (const ExistingFile existing : {ExistingFile::kKeep, ExistingFile::kReplace}) {
      expect_usage_error([&] { write_file_atomically(path, {'x'}, existing, "--output"); },
                         "--output " + path.string() + " is " + kind +
                             "; only a regular file is ever replaced");
    }
  }
  EXPECT_EQ(std::filesystem::symlink_status(link).type(), std::filesystem::file_type::symlink);
  expect_usage_error([&] { write_file_atomically(target, {'x'}, ExistingFile::kKeep, "--output"); },
                     "exists; pass --force to replace it");
  write_file_atomically(target, {'n', 'e', 'w'}, ExistingFile::kReplace, "--output");
  EXPECT_EQ(read_file_bounded(target, {1 << 20, "file", ""}), (std::vector<char>{'n', 'e', 'w'}));
  const auto fresh = scratch.path() / "fresh";
  write_file_atomically(fresh, {'a'}, ExistingFile::kKeep, "--output");
  EXPECT_EQ(read_file_bounded(fresh, {1 << 20, "file", ""}), std::vector<char>{'a'});
}

TEST(FileAccess, AnEmptyTmpdirMeansTheDefault) {
  const char* saved = std::getenv("TMPDIR");
  const std::string restore = saved ? saved : "";
  ::setenv("TMPDIR", "", 1);
  EXPECT_EQ(temporary_folder(), std::filesystem::path("/tmp"));
  ::setenv("TMPDIR", "/nonexistent-fusedops", 1);
  expect_usage_error([] { temporary_folder(); }, "/nonexistent-fusedops is not a folder");
  if (saved) {
    ::setenv("TMPDIR", restore.c_str(), 1);
  } else {
    ::unsetenv("TMPDIR");
  }
}

TEST(CpuIsa, RefusesAPackageForInstructionsThisCpuLacks) {
  HostCpu avx2_only{"x86_64", {{"avx2", true}, {"fma3", true}, {"f16c", true},
                               {"avx512_f", false}}};
  check_cpu_can_run("AVX2", "x86_64", {}, avx2_only, "m.pt2");
  expect_usage_error([&] { check_cpu_can_run("AVX512", "x86_64", {}, avx2_only, "m.pt2"); },
                     "this CPU lacks [avx512_f, avx512_dq, avx512_vl, avx512_bw]");
  expect_usage_error([&] { check_cpu_can_run("AVX2", "x86_64", {"sse4a"}, avx2_only, "m.pt2"); },
                     "this CPU lacks [sse4a]");
  expect_usage_error([&] { check_cpu_can_run("FUTURE_ISA", "x86_64", {}, avx2_only, "m.pt2"); },
                     "which this app cannot check");
  expect_usage_error([&] { check_cpu_can_run("AVX2", "aarch64", {}, avx2_only, "m.pt2"); },
                     "compiled by AOTInductor for aarch64 CPUs; this one is x86_64");
}

TEST(CpuIsa, ThisCpuRunsWhatItReports) {
  const HostCpu host = HostCpu::detect();
  EXPECT_FALSE(host.architecture.empty());
  std::vector<std::string> present;
  for (const auto& [name, has] : host.features) {
    if (has) {
      present.push_back(name);
    }
  }
  check_cpu_can_run("", host.architecture, present, host, "here.pt2");
}

TEST(TritonConfig, AcceptsWhatExportWrites) {
  check_triton_config(parse_triton_config(kExportedConfig, "c"), model98_expectation(), "c");
}

TEST(TritonConfig, RefusesRandomBytesAndUnknownFields) {
  std::string noise;
  for (int i = 0; i < 3000; ++i) {
    noise += static_cast<char>((i * 7919 + 13) % 256);
  }
  EXPECT_THROW(parse_triton_config(noise, "c"), UsageError);
  expect_usage_error([] { parse_triton_config("name: \"x\"\nnot_a_field: 1\n", "c"); },
                     "c:2:");
  // Found by fuzz_triton_config: protobuf's text parser takes it, its JSON printer passes it on.
  expect_usage_error([] { parse_triton_config("name: \"s\xc1\x91\x9e\x91\"\n", "c"); },
                     "c: a string field is not valid UTF-8");
}

TEST(TritonConfig, CrossChecksTheModel) {
  const TritonConfigExpectation expected = model98_expectation();
  auto check = [&](const std::string& text, const TritonConfigExpectation& e) {
    check_triton_config(parse_triton_config(text, "c"), e, "c");
  };
  expect_usage_error([&] { check(replace(kExportedConfig, "dims: [ 256 ]", "dims: [ 255 ]"), expected); },
                     "input[0].dims must be [256]");
  expect_usage_error([&] { check(replace(kExportedConfig, "TYPE_FP32", "TYPE_FP16"), expected); },
                     "input[0].data_type must be TYPE_FP32, got TYPE_FP16");
  expect_usage_error([&] { check(replace(kExportedConfig, "_max\"", "_min\""), expected); },
                     "name must be");
  expect_usage_error([&] { check(replace(kExportedConfig, "pytorch_libtorch", "torch_aoti"), expected); },
                     "platform must be \"pytorch_libtorch\"");
  expect_usage_error([&] { check(replace(kExportedConfig, "max_batch_size: 32", "max_batch_size: 0"), expected); },
                     "max_batch_size must be >= 1");
  expect_usage_error([&] { check(replace(kExportedConfig, "reshape: { shape: [ ] }", ""), expected); },
                     "output[0].dims must be [ 1 ] with reshape");
  TritonConfigExpectation package = expected;
  package.platform = "torch_aoti";
  package.model_file = "model.pt2";
  package.pinned_kind = "KIND_CPU";
  expect_usage_error([&] { check(replace(kExportedConfig, "pytorch_libtorch", "torch_aoti"), package); },
                     "instance_group[0].kind must be KIND_CPU");
  // What export.py writes for a .pt2 has no dynamic_batching (docs/TRITON_PT2_BATCHING.md).
  const std::string package_config = replace(
      replace(kExportedConfig, "pytorch_libtorch", "torch_aoti"), "KIND_AUTO", "KIND_CPU");
  expect_usage_error([&] { check(package_config, package); },
                     "dynamic_batching must be absent for a .pt2");
  check(replace(package_config, "dynamic_batching { }", ""), package);
  TritonConfigExpectation train = expected;
  train.rows_independent = false;
  expect_usage_error([&] { check(kExportedConfig, train); }, "dynamic_batching must be absent");
  expect_usage_error([&] { check(replace(kExportedConfig, "\"true\"", "\"yes\""), expected); },
                     "parameters[INFERENCE_MODE] must be \"true\" or \"false\"");
}
