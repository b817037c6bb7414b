// trace_json.h: a rank timeline's spans (src/core/timeline.h) as a Chrome trace event file, the
// JSON that Perfetto (ui.perfetto.dev) and chrome://tracing open: one process per rank, one thread
// per track (host, compute stream, comm stream), each span a complete ("X") event whose args say
// its epoch and step and, for a collective, its algorithm, bytes and bucket. Check a file with
// scripts/check_trace.py.
//
//   TraceInfo info;
//   info.process_names = {"rank 0: cpu:0 (1 thread)", "rank 1: cpu:1 (1 thread)"};
//   info.other = {{"command", "dpbench train ..."}, {"model", "lenet"}};
//   write_chrome_trace("run.json", spans, info);
//
// Layout of the file (Trace Event Format, the JSON object form):
//   {"displayTimeUnit":"ms", "otherData":{...info.other, "time_origin_s": T0},
//    "traceEvents":[ metadata ("M": process_name, process_sort_index, thread_name,
//                    thread_sort_index) for every rank and track with spans, then the spans ]}
//   pid = rank + 1 and tid = 10 * (rank + 1) + track + 1 (Perfetto treats pid 0 and tid 0 as the
//   kernel's idle task); ts and dur in microseconds, ts from T0 = the earliest span's start (so
//   the numbers stay small), to the nanosecond. Spans are written per rank and track in time
//   order (the enclosing span first when two start together).
// The file is streamed to a temporary file and renamed into place (src/core/files.h): 10^6 spans
// take about a second and no more memory than the spans' own.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "src/core/timeline.h"

namespace dpb {

struct TraceInfo {
  // Process name of rank r (its device, e.g. "rank 0: cpu:0 (1 thread)"); a rank beyond the list
  // or with an empty name is called "rank <r>".
  std::vector<std::string> process_names;
  // The run's description, in "otherData" in this order (command line, model, algorithm, ...).
  std::vector<std::pair<std::string, std::string>> other;
};

// The thread name of a track in the trace: "host", "compute stream", "comm stream" (its first
// word is to_string(track), which scripts/check_trace.py matches).
std::string trace_thread_name(Track t);

// Writes the spans of every rank to `path` as described above. Throws dpb::Error naming the path
// when it cannot be written (nothing is left behind then).
void write_chrome_trace(const std::string& path, const std::vector<Span>& spans,
                        const TraceInfo& info);

}  // namespace dpb
