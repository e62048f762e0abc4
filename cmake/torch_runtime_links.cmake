# What fusedops links from find_package(Torch), so that every binary resolves the same shared
# libraries torch itself resolves, and its RUNPATH holds nothing but what we put there.
#
# - The CUDA runtime and cuBLAS: libfusedops links neither. Linked directly (the toolkit's
#   CUDA::cublas, torch::cudart), the loader looked them up through libfusedops' own search
#   path: a C++ host got cuBLAS from /usr/local/cuda and cuBLASLt from the pip wheel that
#   libtorch_cuda loads, two copies in one process. Unlinked, their symbols bind to the
#   copies libtorch_cuda (a needed library of libfusedops) loads through torch's own RPATH,
#   whatever the host: one CUDA runtime and one cuBLAS, torch's.
# - Absolute paths into the CUDA toolkit in TORCH_LIBRARIES (nvrtc, cudart): no fusedops
#   binary calls them, and each put the toolkit's folder into the binaries' RUNPATH.
# - caffe2::mkl's link folders: torch's CMake lists ${MKL_ROOT}/lib/intel64, .../intel64_win,
#   .../win-x64 even when MKL_ROOT is empty (the pip wheel links MKL statically), and CMake
#   copied those link folders into every RUNPATH (/lib/intel64, ...).
if(TARGET torch::cudart)
  set_property(TARGET torch::cudart PROPERTY INTERFACE_LINK_LIBRARIES "")
endif()

set(_fusedops_torch_libraries "")
foreach(_item IN LISTS TORCH_LIBRARIES)
  if(IS_ABSOLUTE "${_item}")
    cmake_path(IS_PREFIX FUSEDOPS_TORCH_LIB_DIR "${_item}" NORMALIZE _in_torch)
    if(NOT _in_torch)
      continue()
    endif()
  endif()
  list(APPEND _fusedops_torch_libraries "${_item}")
endforeach()
set(TORCH_LIBRARIES ${_fusedops_torch_libraries})

if(TARGET caffe2::mkl)
  get_target_property(_mkl_dirs caffe2::mkl INTERFACE_LINK_DIRECTORIES)
  set(_existing_mkl_dirs "")
  foreach(_dir IN LISTS _mkl_dirs)
    if(IS_DIRECTORY "${_dir}")
      list(APPEND _existing_mkl_dirs "${_dir}")
    endif()
  endforeach()
  set_property(TARGET caffe2::mkl PROPERTY INTERFACE_LINK_DIRECTORIES "${_existing_mkl_dirs}")
endif()
