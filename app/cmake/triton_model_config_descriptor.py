"""Writes Triton's model configuration schema (the serialized FileDescriptorProto of
model_config.proto) as a C++ source, from the tritonclient wheel (requirements.txt), so that
fusedops_app validates config.pbtxt with protobuf's own text parser against Triton's schema
without a copy of Triton's files in this repository.

    python triton_model_config_descriptor.py OUTPUT.cpp

The module is loaded from its file: tritonclient/grpc/__init__.py imports grpcio, which the
schema does not need.
"""
import importlib.util
import sys
from pathlib import Path


def load_model_config_module():
    spec = importlib.util.find_spec("tritonclient")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("tritonclient is not installed in this Python (pip install -r requirements.txt)")
    path = Path(next(iter(spec.submodule_search_locations))) / "grpc" / "model_config_pb2.py"
    if not path.is_file():
        sys.exit(f"{path} not found: this tritonclient does not ship Triton's model config schema")
    module_spec = importlib.util.spec_from_file_location("triton_model_config_pb2", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module, path


def main() -> int:
    module, path = load_model_config_module()
    descriptor = module.DESCRIPTOR.serialized_pb
    body = ",".join(str(b) for b in descriptor)
    source = (
        f"// Generated from {path.name} of the tritonclient wheel by "
        "app/cmake/triton_model_config_descriptor.py. Do not edit.\n"
        "#include <cstddef>\n"
        "namespace fusedops_app {\n"
        f"extern const unsigned char kTritonModelConfigDescriptor[] = {{{body}}};\n"
        f"extern const std::size_t kTritonModelConfigDescriptorSize = {len(descriptor)};\n"
        "}  // namespace fusedops_app\n")
    # CMake runs this at every configure (scripts/build.sh configures at every call): a file
    # rewritten with the same text gets a new time, and ninja then recompiles it and relinks the
    # app and the tests that link it (issue 41). Written only when its text changes.
    output = Path(sys.argv[1])
    if not output.is_file() or output.read_text() != source:
        output.write_text(source)
    return 0


if __name__ == "__main__":
    sys.exit(main())
