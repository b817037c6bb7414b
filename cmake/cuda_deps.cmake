# cuda_deps.cmake (included by CMakeLists.txt once nvcc and the CUDA toolkit are found): finds
# cuDNN and NCCL, which the CUDA toolkit does not ship, and checks that each one's header and
# library come from one install.
#   dpb_find_cuda_dep(CUDNN LABEL cuDNN HEADER cudnn.h VERSION_HEADERS cudnn_version.h cudnn.h
#                     MACROS CUDNN_MAJOR CUDNN_MINOR CUDNN_PATCHLEVEL SONAME 9 HOWTO "...")
# Where: <LIB>_ROOT (CMake variable, else environment variable) alone when it is set, so that it
# names one install and nothing else is picked behind the user's back; otherwise the CUDA toolkit,
# NVIDIA's pip wheels (site-packages/nvidia/<lib>, DPB_WHEEL_DIRS) and the system paths. The
# library is looked for next to the header first (<root>/lib, lib64, lib/<arch>), and the header's
# major version (and minor, when the library's file name has one: libcudnn.so.9.1.0) must match the
# library's file name (libcudnn.so.9); a mismatch means a header and a library of two installs.
# Results: DPB_<LIB>_FOUND, DPB_<LIB>_INCLUDE and DPB_<LIB>_LIBRARY (cache; set them by hand to
# skip the search), DPB_<LIB>_VERSION (the header's) and, when not found, DPB_<LIB>_WHY: what is
# missing or wrong and how to get it. tests/cmake_configure_test.sh covers the outcomes.

# "9.19.0" from the first of `headers` in `dir` that defines the macros, or "".
function(_dpb_header_version out dir headers macros)
  foreach(h ${headers})
    if(NOT EXISTS "${dir}/${h}")
      continue()
    endif()
    list(JOIN macros "|" alternatives)
    file(STRINGS "${dir}/${h}" defs REGEX "^#define[ \t]+(${alternatives})[ \t]+[0-9]+")
    set(parts "")
    foreach(m ${macros})
      if(defs MATCHES "#define[ \t]+${m}[ \t]+([0-9]+)")
        list(APPEND parts ${CMAKE_MATCH_1})
      endif()
    endforeach()
    if(parts)
      list(JOIN parts "." v)
      set(${out} "${v}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out} "" PARENT_SCOPE)
endfunction()

function(dpb_find_cuda_dep LIB)
  cmake_parse_arguments(A "" "LABEL;HEADER;SONAME;HOWTO" "VERSION_HEADERS;MACROS" ${ARGN})
  string(TOLOWER ${LIB} name)
  set(root "${${LIB}_ROOT}")
  if(NOT root AND DEFINED ENV{${LIB}_ROOT})
    set(root "$ENV{${LIB}_ROOT}")
  endif()
  # A changed <LIB>_ROOT searches again (find_path/find_library keep a found result otherwise).
  if(DEFINED DPB_${LIB}_SEARCHED_ROOT AND NOT DPB_${LIB}_SEARCHED_ROOT STREQUAL "${root}")
    unset(DPB_${LIB}_INCLUDE CACHE)
    unset(DPB_${LIB}_LIBRARY CACHE)
  endif()
  set(DPB_${LIB}_SEARCHED_ROOT "${root}" CACHE INTERNAL "${LIB}_ROOT of the last search")
  set(names ${name} lib${name}.so.${A_SONAME})  # pip wheels ship only the versioned name
  set(suffixes lib lib64 lib/${CMAKE_LIBRARY_ARCHITECTURE})
  if(root)
    set(where "${LIB}_ROOT=${root}")
    set(search HINTS ${root} NO_DEFAULT_PATH)
  else()
    set(where "the CUDA toolkit, NVIDIA's pip wheels and the system paths")
    set(search HINTS ${CUDAToolkit_LIBRARY_ROOT} ${DPB_WHEEL_DIRS} ${CUDAToolkit_INCLUDE_DIRS}
                     ${CUDAToolkit_LIBRARY_DIR})
  endif()
  set(found FALSE)
  set(version "")
  find_path(DPB_${LIB}_INCLUDE ${A_HEADER} ${search} PATH_SUFFIXES include
            DOC "Folder of ${A_HEADER}")
  if(DPB_${LIB}_INCLUDE)
    # The library of the header's own install first, then wherever else the search looks.
    get_filename_component(header_root "${DPB_${LIB}_INCLUDE}" DIRECTORY)
    find_library(DPB_${LIB}_LIBRARY NAMES ${names} HINTS ${header_root} PATH_SUFFIXES ${suffixes}
                 NO_DEFAULT_PATH DOC "lib${name} (next to ${A_HEADER} when it is there)")
    find_library(DPB_${LIB}_LIBRARY NAMES ${names} ${search} PATH_SUFFIXES ${suffixes})
    _dpb_header_version(version "${DPB_${LIB}_INCLUDE}" "${A_VERSION_HEADERS}" "${A_MACROS}")
  endif()
  if(NOT DPB_${LIB}_INCLUDE)
    string(CONCAT why "${A_LABEL} not found (no ${A_HEADER} in ${where}): ${A_HOWTO}")
  elseif(NOT DPB_${LIB}_LIBRARY)
    string(CONCAT why "${A_LABEL} not found (${DPB_${LIB}_INCLUDE}/${A_HEADER} but no library "
                      "lib${name} in ${where}): ${A_HOWTO}")
  else()
    get_filename_component(real "${DPB_${LIB}_LIBRARY}" REALPATH)
    get_filename_component(file "${real}" NAME)
    string(REPLACE "." ";" hparts "${version}")
    list(LENGTH hparts n)
    set(why "")
    if(n GREATER 1 AND file MATCHES "\\.so\\.([0-9]+)(\\.([0-9]+))?")
      list(GET hparts 0 hmajor)
      list(GET hparts 1 hminor)
      set(lmajor ${CMAKE_MATCH_1})
      set(lminor "${CMAKE_MATCH_3}")
      if(NOT hmajor EQUAL lmajor OR (NOT lminor STREQUAL "" AND lminor LESS hminor))
        string(CONCAT why "${A_LABEL}'s header and library come from two installs: "
          "${DPB_${LIB}_INCLUDE} has ${A_LABEL} ${version} but the library ${DPB_${LIB}_LIBRARY} is "
          "${file}. Point ${LIB}_ROOT at one install (its include/ and lib/), or set "
          "DPB_${LIB}_INCLUDE and DPB_${LIB}_LIBRARY to a matching pair")
      endif()
    else()
      message(STATUS "dpbench: ${A_LABEL} ${version}: the library's version cannot be read from its "
                     "file name (${file}); header and library not compared")
    endif()
    if(NOT why)
      set(found TRUE)
    endif()
  endif()
  set(DPB_${LIB}_FOUND ${found} PARENT_SCOPE)
  set(DPB_${LIB}_VERSION "${version}" PARENT_SCOPE)
  set(DPB_${LIB}_WHY "${why}" PARENT_SCOPE)
  if(found)
    message(STATUS "dpbench: ${A_LABEL} ${version}: ${DPB_${LIB}_INCLUDE}, ${DPB_${LIB}_LIBRARY}")
  endif()
endfunction()
