// rank_threads.h: test helper: run fn(rank) on k threads, one per rank, with the harness the
// trainer and the benchmarks use (src/core/rank_threads.h): dpb::on_ranks(k, fn[, on_error]).
#pragma once
#include "src/core/rank_threads.h"
