// files.h: result files are never left half-written: write a temporary file beside the target,
// then rename it into place (atomic on POSIX).
#pragma once
#include <string>
#include <vector>

namespace dpb {

void write_file_atomic(const std::string& path, const std::string& contents);
std::string read_file(const std::string& path);  // "" when it does not exist

// Appends rows to a CSV with one header line. When the file exists its header must equal
// `header` (otherwise an error names the file). The whole file is rewritten atomically.
void append_csv_rows(const std::string& path, const std::string& header,
                     const std::vector<std::string>& rows);

}  // namespace dpb
