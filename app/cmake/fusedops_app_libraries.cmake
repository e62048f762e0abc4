# The app's libraries that read and check files, shared by app/CMakeLists.txt and the fuzzing
# build (app/fuzz/CMakeLists.txt): find their dependencies with messages that say what to
# install, and define
#   fusedops_app_triton  config.pbtxt against Triton's schema (protobuf; no libtorch headers:
#                        libtorch's include folder holds protobuf headers of another version)
#   fusedops_app_files   tensor files, manifests, .pt2 archives, fusedops.json (libtorch,
#                        libzip, OpenSSL's libcrypto; not libfusedops)
# Needs Torch found and Python3_EXECUTABLE (the Python with requirements.txt installed).
set(FUSEDOPS_APP_SOURCE_DIR "${CMAKE_CURRENT_LIST_DIR}/../src")

find_package(fmt REQUIRED CONFIG)
find_package(spdlog REQUIRED CONFIG)
find_package(nlohmann_json 3.10 REQUIRED CONFIG)
find_package(Protobuf 3.12 QUIET)
if(NOT Protobuf_FOUND OR NOT Protobuf_LIBRARY)
  message(FATAL_ERROR "fusedops_app: protobuf (C++ library and headers) not found; it parses "
                      "config.pbtxt with Triton's schema. Install libprotobuf-dev "
                      "(scripts/env.sh does), or pass -DFUSEDOPS_BUILD_APP=OFF")
endif()
# Not protobuf::libprotobuf: Torch's CMake package defines a target of that name without the
# system library behind it.
if(NOT TARGET fusedops_protobuf)
  add_library(fusedops_protobuf INTERFACE IMPORTED)
  target_include_directories(fusedops_protobuf INTERFACE "${Protobuf_INCLUDE_DIR}")
  target_link_libraries(fusedops_protobuf INTERFACE "${Protobuf_LIBRARY}")
endif()
# Not libzip's CMake package: Debian's names a zipcmp tool that libzip-dev does not install.
find_path(FUSEDOPS_LIBZIP_INCLUDE_DIR zip.h)
find_library(FUSEDOPS_LIBZIP_LIBRARY zip)
if(NOT FUSEDOPS_LIBZIP_INCLUDE_DIR OR NOT FUSEDOPS_LIBZIP_LIBRARY)
  message(FATAL_ERROR "fusedops_app: libzip not found; it inspects .pt2 archives before "
                      "anything is unpacked. Install libzip-dev (scripts/env.sh does), or pass "
                      "-DFUSEDOPS_BUILD_APP=OFF")
endif()
if(NOT TARGET fusedops_libzip)
  add_library(fusedops_libzip INTERFACE IMPORTED)
  target_include_directories(fusedops_libzip INTERFACE "${FUSEDOPS_LIBZIP_INCLUDE_DIR}")
  target_link_libraries(fusedops_libzip INTERFACE "${FUSEDOPS_LIBZIP_LIBRARY}")
endif()
find_package(OpenSSL QUIET COMPONENTS Crypto)
if(NOT OpenSSL_FOUND)
  message(FATAL_ERROR "fusedops_app: OpenSSL's libcrypto not found; it computes the SHA-256 "
                      "digests of fusedops_manifest.json. Install libssl-dev (scripts/env.sh "
                      "does), or pass -DFUSEDOPS_BUILD_APP=OFF")
endif()

# Triton's model_config.proto as a serialized descriptor, from the tritonclient wheel.
set(_descriptor_source "${CMAKE_CURRENT_BINARY_DIR}/triton_model_config_descriptor.cpp")
set(_descriptor_script "${CMAKE_CURRENT_LIST_DIR}/triton_model_config_descriptor.py")
execute_process(
  COMMAND "${Python3_EXECUTABLE}" "${_descriptor_script}" "${_descriptor_source}"
  RESULT_VARIABLE _descriptor_result
  ERROR_VARIABLE _descriptor_error)
if(NOT _descriptor_result EQUAL 0)
  message(FATAL_ERROR "fusedops_app: could not take Triton's model config schema from the "
                      "tritonclient wheel with ${Python3_EXECUTABLE}: ${_descriptor_error}"
                      "Install requirements.txt into that Python (scripts/env.sh does).")
endif()
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_descriptor_script}")

# libtorch ships fmt 12 headers in torch/include/fmt, and torch's include folders (-isystem)
# are searched before /usr/include, so `#include <fmt/core.h>` would find those. The system
# spdlog is compiled against the system fmt (SPDLOG_FMT_EXTERNAL; fmt 9 on Debian 12), and
# mixing the two fails to compile or link. A folder holding only a link to the system fmt
# headers, added with -I (searched before every -isystem folder), makes the app see the fmt
# its spdlog was built with. libtorch's own headers that the app includes do not use fmt.
get_target_property(_fmt_include_dirs fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
find_path(FUSEDOPS_SYSTEM_FMT_INCLUDE_DIR fmt/core.h PATHS ${_fmt_include_dirs} NO_DEFAULT_PATH)
if(NOT FUSEDOPS_SYSTEM_FMT_INCLUDE_DIR)
  message(FATAL_ERROR "fusedops_app: fmt/core.h not found in fmt's include folders "
                      "(${_fmt_include_dirs}); install libfmt-dev")
endif()
set(FUSEDOPS_APP_FMT_SHIM_DIR "${CMAKE_CURRENT_BINARY_DIR}/system-fmt-include")
file(MAKE_DIRECTORY "${FUSEDOPS_APP_FMT_SHIM_DIR}")
file(CREATE_LINK "${FUSEDOPS_SYSTEM_FMT_INCLUDE_DIR}/fmt" "${FUSEDOPS_APP_FMT_SHIM_DIR}/fmt"
     SYMBOLIC)

add_library(fusedops_app_triton STATIC
  "${FUSEDOPS_APP_SOURCE_DIR}/triton_config.cpp"
  "${FUSEDOPS_APP_SOURCE_DIR}/printable.cpp"
  "${_descriptor_source}")
target_include_directories(fusedops_app_triton PUBLIC "${FUSEDOPS_APP_SOURCE_DIR}")
target_link_libraries(fusedops_app_triton PUBLIC
  fusedops_protobuf fmt::fmt nlohmann_json::nlohmann_json)
target_compile_options(fusedops_app_triton PRIVATE -Wall -Wextra -Wno-unused-parameter)

add_library(fusedops_app_files STATIC
  "${FUSEDOPS_APP_SOURCE_DIR}/aoti_package.cpp"
  "${FUSEDOPS_APP_SOURCE_DIR}/app_error.cpp"
  "${FUSEDOPS_APP_SOURCE_DIR}/cpu_isa.cpp"
  "${FUSEDOPS_APP_SOURCE_DIR}/file_access.cpp"
  "${FUSEDOPS_APP_SOURCE_DIR}/json_input.cpp"
  "${FUSEDOPS_APP_SOURCE_DIR}/manifest.cpp"
  "${FUSEDOPS_APP_SOURCE_DIR}/model_metadata.cpp"
  "${FUSEDOPS_APP_SOURCE_DIR}/repository_layout.cpp"
  "${FUSEDOPS_APP_SOURCE_DIR}/temporary_directory.cpp"
  "${FUSEDOPS_APP_SOURCE_DIR}/tensor_io.cpp"
  "${FUSEDOPS_APP_SOURCE_DIR}/tensor_pickle.cpp"
  "${FUSEDOPS_APP_SOURCE_DIR}/zip_reader.cpp")
# ops/include: fusedops/accuracy.h, the header-only tolerance rule check shares with the tests.
target_include_directories(fusedops_app_files PUBLIC
  "${FUSEDOPS_APP_SOURCE_DIR}" "${FUSEDOPS_APP_FMT_SHIM_DIR}"
  "${FUSEDOPS_APP_SOURCE_DIR}/../../ops/include")
target_link_libraries(fusedops_app_files PUBLIC
  fusedops_app_triton ${TORCH_LIBRARIES} spdlog::spdlog fmt::fmt nlohmann_json::nlohmann_json
  fusedops_libzip OpenSSL::Crypto)
target_compile_options(fusedops_app_files PUBLIC -Wall -Wextra -Wno-unused-parameter)
