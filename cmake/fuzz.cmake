# fuzz.cmake (included by CMakeLists.txt after the targets): the IDX fuzz corpus as ordinary tests.
# dpb_fuzz_replay feeds each file of fuzz/corpus/idx/ to the entry point libFuzzer calls
# (fuzz/idx_fuzz.cpp), so every seed and every crash input added later is tested without libFuzzer.
# The libFuzzer build itself is fuzz/CMakeLists.txt (clang), run by scripts/sanitize.sh fuzz.
if(DPB_TESTS)
  add_executable(dpb_fuzz_replay fuzz/replay_main.cpp fuzz/idx_fuzz.cpp)
  target_link_libraries(dpb_fuzz_replay PRIVATE dpb_core)
  target_compile_options(dpb_fuzz_replay PRIVATE ${DPB_WARN})
  file(GLOB DPB_IDX_CORPUS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/idx/*)
  foreach(input ${DPB_IDX_CORPUS})
    get_filename_component(name ${input} NAME)
    add_test(NAME fuzz_corpus_idx/${name} COMMAND dpb_fuzz_replay ${input})
  endforeach()
endif()
