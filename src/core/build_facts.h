// build_facts.h: the build's facts as string literals, from CMake's compile definitions
// (DPB_BUILD_FACTS in CMakeLists.txt: version, build type, compiler); "unknown" when a file is
// compiled outside that build. `dpbench info` and the ranks' agreement check print them.
#pragma once

#ifndef DPB_VERSION
#define DPB_VERSION "unknown"
#endif
#ifndef DPB_BUILD_TYPE
#define DPB_BUILD_TYPE "unknown"
#endif
#ifndef DPB_COMPILER
#define DPB_COMPILER "unknown"
#endif
