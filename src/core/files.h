// files.h: result files are never left half-written: each write goes to a temporary file beside
// the target, then is renamed into place (atomic on POSIX). Output paths are checked before any
// work, so a bad --csv is refused at start-up rather than after a long run, and every message names
// the path as the user gave it.
//
// A symbolic link is followed: its target is replaced and the link stays. A read-only file is
// refused (judged by its mode bits too, so root is not let through), as is a directory, any other
// non-regular file, a missing directory, or one where no file can be created. A replaced file keeps
// its permission bits.
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dpb {

// Throws dpb::Error unless `path` can be written as described above. Creates and removes a probe
// file in the target's directory.
void check_output_path(const std::string& path);

void write_file_atomic(const std::string& path, const std::string& contents);
// Streaming form, for outputs too large to build as one string: fill(put) calls put(piece) as
// often as it likes; the pieces go to the temporary file in order and the rename happens when
// fill returns (an exception from fill removes the temporary file and propagates).
using FilePieceSink = std::function<void(std::string_view)>;
void write_file_atomic(const std::string& path, const std::function<void(const FilePieceSink&)>& fill);
std::string read_file(const std::string& path);  // "" when it does not exist

// A CSV with one header line, appended to as results arrive (e.g. once per epoch, so that an
// interrupted run keeps its finished rows); each append rewrites the whole file atomically, taking
// the file's current content as the base, under an exclusive flock on the file (runs appending to
// one CSV at once take turns; none of their rows is lost). The header and rows are preformatted
// lines without '\n'.
class CsvAppender {
 public:
  // Checks the path (check_output_path) and, when the file exists, that its header is `header`.
  CsvAppender(std::string path, std::string header);
  void append(const std::vector<std::string>& rows);
  const std::string& path() const { return path_; }

 private:
  std::string path_, header_;
};

// One-shot form: CsvAppender(path, header).append(rows).
void append_csv_rows(const std::string& path, const std::string& header,
                     const std::vector<std::string>& rows);

// Throws dpb::Error naming both options when two outputs of one run are the same file
// (`--csv s.csv --dump-params s.csv` would replace the CSV by parameters), through links, "./"
// and hard links. Entries are {option, path}; an empty path (option not given) is skipped.
void check_distinct_outputs(const std::vector<std::pair<std::string, std::string>>& option_path);

// A temporary file that outlives a whole run (dpbench-micro's FILE.tmp.<pid>, renamed to FILE at
// the end): removed when the process ends by SIGTERM, SIGINT or SIGHUP (the handler unlinks it and
// the signal then ends the process as it would have); one per process, "" to forget it (after the
// rename). A SIGKILL leaves it: remove_stale_temps removes those.
void remove_on_termination_signal(const std::string& tmp_path);
// Removes `path`.tmp.<pid> files of processes that are gone (a run killed by SIGKILL); returns
// how many. A live process's temporary file is left alone.
int remove_stale_temps(const std::string& path);

}  // namespace dpb
