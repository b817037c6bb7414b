# cuda.cmake (included by CMakeLists.txt, and by tests/cmake_configure_test.sh's small project):
# decides whether the CUDA backend is built, from DPB_CUDA and what is installed.
# AUTO builds the CUDA backend when nvcc, the toolkit's libraries and cuDNN are found, with NCCL
# (--allreduce nccl) when it is found too; otherwise it builds the CPU backend and warns what is
# missing and how to get it. ON needs all of them and fails with the same message. OFF: CPU only.
set(DPB_HAVE_CUDA OFF)
set(DPB_HAVE_NCCL OFF)
if(NOT DPB_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  set(DPB_CUDA_MISSING "")  # why the CUDA backend cannot be built, and how to mend it
  if(CMAKE_CUDA_COMPILER)
    # The toolkit of this nvcc (FindCUDAToolkit before CMake 3.26 does not look at
    # CMAKE_CUDA_COMPILER until the CUDA language is enabled, which waits for cuDNN below).
    if(NOT DEFINED CUDAToolkit_ROOT AND NOT DEFINED ENV{CUDAToolkit_ROOT})
      get_filename_component(CUDAToolkit_ROOT "${CMAKE_CUDA_COMPILER}" DIRECTORY)
      get_filename_component(CUDAToolkit_ROOT "${CUDAToolkit_ROOT}" DIRECTORY)
    endif()
    find_package(CUDAToolkit)
  endif()
  if(NOT CMAKE_CUDA_COMPILER)
    set(DPB_CUDA_MISSING "no CUDA compiler (nvcc) was found; install the CUDA toolkit")
  elseif(NOT CUDAToolkit_FOUND)
    string(CONCAT DPB_CUDA_MISSING "nvcc (${CMAKE_CUDA_COMPILER}) was found but not the CUDA "
                                   "toolkit's libraries; set CUDAToolkit_ROOT to its folder")
  else()
    # cuDNN and NCCL: CUDNN_ROOT / NCCL_ROOT, the toolkit, or NVIDIA's pip wheels
    # (site-packages/nvidia/{cudnn,nccl}); cmake/cuda_deps.cmake.
    execute_process(COMMAND python3 -c
      "import nvidia, os; print(';'.join(os.path.join(p, d) for p in nvidia.__path__ for d in ('cudnn', 'nccl')))"
      OUTPUT_VARIABLE DPB_WHEEL_DIRS OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    include(${CMAKE_CURRENT_LIST_DIR}/cuda_deps.cmake)
    set(DPB_CU ${CUDAToolkit_VERSION_MAJOR})
    string(CONCAT howto "set CUDNN_ROOT to a cuDNN 9 install (a folder with include/cudnn.h and "
      "lib/), or install it: apt-get install libcudnn9-dev-cuda-${DPB_CU} (NVIDIA's CUDA "
      "repository) or pip install nvidia-cudnn-cu${DPB_CU}")
    dpb_find_cuda_dep(CUDNN LABEL cuDNN HEADER cudnn.h VERSION_HEADERS cudnn_version.h cudnn.h
      MACROS CUDNN_MAJOR CUDNN_MINOR CUDNN_PATCHLEVEL SONAME 9 HOWTO "${howto}")
    string(CONCAT howto "set NCCL_ROOT to an NCCL 2 install (a folder with include/nccl.h and "
      "lib/), or install it: apt-get install libnccl-dev (NVIDIA's CUDA repository) or pip "
      "install nvidia-nccl-cu${DPB_CU}")
    dpb_find_cuda_dep(NCCL LABEL NCCL HEADER nccl.h VERSION_HEADERS nccl.h
      MACROS NCCL_MAJOR NCCL_MINOR NCCL_PATCH SONAME 2 HOWTO "${howto}")
    if(NOT DPB_CUDNN_FOUND)
      set(DPB_CUDA_MISSING "${DPB_CUDNN_WHY}")
    endif()
  endif()
  if(DPB_CUDA STREQUAL "ON" AND NOT DPB_CUDA_MISSING AND NOT DPB_NCCL_FOUND)
    set(DPB_CUDA_MISSING "${DPB_NCCL_WHY} (DPB_CUDA=AUTO builds the CUDA backend without NCCL)")
  endif()
  if(DPB_CUDA_MISSING AND DPB_CUDA STREQUAL "ON")
    message(FATAL_ERROR "dpbench: DPB_CUDA=ON but ${DPB_CUDA_MISSING}; or configure with "
                        "-DDPB_CUDA=OFF (or AUTO) for the CPU backend only")
  elseif(DPB_CUDA_MISSING AND NOT CMAKE_CUDA_COMPILER)
    message(STATUS "dpbench: nvcc not found, building the CPU backend only")
  elseif(DPB_CUDA_MISSING)
    message(WARNING "dpbench: building the CPU backend only: ${DPB_CUDA_MISSING}")
  else()
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # A100 (80), A10/A40/RTX 30 (86), L4/L40/RTX 40 (89), H100/H200 (90); override with
      # -DCMAKE_CUDA_ARCHITECTURES=... (e.g. 90 alone: one architecture, a shorter build).
      set(CMAKE_CUDA_ARCHITECTURES "80;86;89;90")
    endif()
    # libcudart.so, not the static runtime next to it (one runtime for us, cuDNN and NCCL).
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 20)
    if(CMAKE_VERSION VERSION_LESS 3.25.2)  # CMake learned nvcc's -std=c++20 in 3.25.2
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION -std=c++20)
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION -std=c++20)
    endif()
    set(DPB_HAVE_CUDA ON)
    set(DPB_HAVE_NCCL ${DPB_NCCL_FOUND})
    if(NOT DPB_HAVE_NCCL)
      message(WARNING "dpbench: the CUDA backend is built without NCCL (--allreduce nccl will "
                      "say so): ${DPB_NCCL_WHY}")
    endif()
  endif()
endif()
if(DPB_HAVE_NCCL)
  message(STATUS "dpbench: backends: cpu, cuda (cuDNN ${DPB_CUDNN_VERSION}, NCCL ${DPB_NCCL_VERSION})")
elseif(DPB_HAVE_CUDA)
  message(STATUS "dpbench: backends: cpu, cuda (cuDNN ${DPB_CUDNN_VERSION}, no NCCL)")
else()
  message(STATUS "dpbench: backends: cpu")
endif()
