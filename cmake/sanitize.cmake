# sanitize.cmake (included by CMakeLists.txt before any target): -DDPB_SANITIZE=LIST builds every
# C++ target with those sanitizers, e.g. address,undefined (ASan + UBSan + LeakSanitizer) or thread.
# CUDA sources are not instrumented. scripts/sanitize.sh configures these builds for CI.
set(DPB_SANITIZE "" CACHE STRING "Sanitizers for every C++ target: address,undefined | thread")
if(DPB_SANITIZE)
  if(DPB_SANITIZE MATCHES "thread" AND DPB_SANITIZE MATCHES "address")
    message(FATAL_ERROR "DPB_SANITIZE=${DPB_SANITIZE}: ThreadSanitizer cannot be combined with "
                        "AddressSanitizer; configure two build directories")
  endif()
  set(DPB_SAN_FLAGS -fsanitize=${DPB_SANITIZE} -fno-omit-frame-pointer -g)
  if(DPB_SANITIZE MATCHES "undefined")
    list(APPEND DPB_SAN_FLAGS -fno-sanitize-recover=undefined)  # a UB report fails the test
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${DPB_SAN_FLAGS}>")
  add_link_options(-fsanitize=${DPB_SANITIZE})
  message(STATUS "dpbench: C++ targets built with -fsanitize=${DPB_SANITIZE}")
endif()
