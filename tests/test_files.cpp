// test_files.cpp: result files (src/core/files.h): output paths refused before any work with the
// user's path in the message, symlinks followed, read-only files refused, permissions kept, CSV
// rows appended atomically with no temporary file left, concurrent appends serialised (no row
// lost), two outputs of one run on one file refused. Run: ./dpb_tests --gtest_filter='Files*'
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "src/core/files.h"
#include "tests/data_test_util.h"

namespace {

using namespace dpb_test;

const std::string kHeader = "a,b";

// Names in `dir` other than `keep`: a leftover temporary or probe file shows up here.
std::vector<std::string> others(const TempDir& dir, std::initializer_list<std::string> keep) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir.path)) {
    const std::string name = e.path().filename().string();
    if (std::find(keep.begin(), keep.end(), name) == keep.end()) out.push_back(name);
  }
  return out;
}

TEST(Files, CsvRowsAppendedOneAtATime) {
  TempDir dir;
  const std::string path = dir.file("out.csv");
  dpb::CsvAppender csv(path, kHeader);
  EXPECT_FALSE(fs::exists(path));  // checking creates nothing
  csv.append({"1,2"});
  EXPECT_EQ(dpb::read_file(path), "a,b\n1,2\n");
  csv.append({"3,4", "5,6"});
  EXPECT_EQ(dpb::read_file(path), "a,b\n1,2\n3,4\n5,6\n");
  dpb::append_csv_rows(path, kHeader, {"7,8"});  // a second run appends under the same header
  EXPECT_EQ(dpb::read_file(path), "a,b\n1,2\n3,4\n5,6\n7,8\n");
  EXPECT_EQ(others(dir, {"out.csv"}), std::vector<std::string>{});
}

TEST(Files, BadPathsRefusedUpFrontNamingThem) {
  TempDir dir;
  const std::string missing = dir.file("no/such/dir/out.csv");
  expect_error([&] { dpb::CsvAppender(missing, kHeader); },
               {"'" + missing + "'", "directory '" + dir.file("no/such/dir") + "' does not exist"});
  expect_error([&] { dpb::CsvAppender(dir.str(), kHeader); },
               {"'" + dir.str() + "'", "is a directory"});
  write_file(dir.file("plain"), Bytes{'x'});
  expect_error([&] { dpb::check_output_path(dir.file("plain/out.csv")); },
               {dir.file("plain/out.csv"), "is not a directory"});
  expect_error([&] { dpb::check_output_path("/dev/null"); }, {"'/dev/null'", "not a regular file"});
  write_file(dir.file("other.csv"), Bytes{'x', ',', 'y', '\n'});
  expect_error([&] { dpb::CsvAppender(dir.file("other.csv"), kHeader); },
               {dir.file("other.csv"), "header differs", "expected: a,b"});
  EXPECT_EQ(others(dir, {"plain", "other.csv"}), std::vector<std::string>{});
}

TEST(Files, ReadOnlyFileRefusedEvenForRoot) {
  TempDir dir;
  const std::string path = dir.file("keep.csv");
  write_file(path, Bytes{'a', ',', 'b', '\n'});
  ASSERT_EQ(chmod(path.c_str(), 0444), 0);
  expect_error([&] { dpb::CsvAppender(path, kHeader); }, {"'" + path + "'", "read-only"});
  expect_error([&] { dpb::write_file_atomic(path, "new"); }, {"'" + path + "'", "read-only"});
  EXPECT_EQ(dpb::read_file(path), "a,b\n");
}

TEST(Files, UnwritableDirectoryRefusedUpFront) {
  TempDir dir;
  std::string sub = dir.file("ro");
  fs::create_directory(sub);
  ASSERT_EQ(chmod(sub.c_str(), 0555), 0);
  if (access(sub.c_str(), W_OK) == 0) sub = "/proc";  // root writes a 0555 directory; not /proc
  expect_error([&] { dpb::check_output_path(sub + "/out.csv"); },
               {"'" + sub + "/out.csv'", "cannot create files in '" + sub + "'"});
}

TEST(Files, SymlinkIsFollowedAndKept) {
  TempDir dir;
  fs::create_directory(dir.file("results"));
  const std::string target = dir.file("results/run.csv"), link = dir.file("latest.csv");
  fs::create_symlink("results/run.csv", link);  // relative, dangling until the first write
  dpb::CsvAppender csv(link, kHeader);
  csv.append({"1,2"});
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(dpb::read_file(target), "a,b\n1,2\n");
  csv.append({"3,4"});
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(dpb::read_file(target), "a,b\n1,2\n3,4\n");
  ASSERT_EQ(chmod(target.c_str(), 0444), 0);
  expect_error([&] { csv.append({"5,6"}); }, {"'" + link + "' (a link to '", "read-only"});
  fs::create_symlink("loop2", dir.file("loop1"));
  fs::create_symlink("loop1", dir.file("loop2"));
  expect_error([&] { dpb::check_output_path(dir.file("loop1")); },
               {dir.file("loop1"), "too many levels of symbolic links"});
}

TEST(Files, ReplacedFileKeepsItsPermissions) {
  TempDir dir;
  const std::string path = dir.file("p.bin");
  dpb::write_file_atomic(path, "one");
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  dpb::write_file_atomic(path, "two");
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(dpb::read_file(path), "two");
}

// Issue 25: two outputs of one run on one file (--csv s.csv --dump-params s.csv replaced the CSV
// by parameters) are refused naming both options, through "./", "..", links and hard links.
TEST(Files, DistinctOutputsRequired) {
  TempDir dir;
  const std::string csv = dir.file("s.csv");
  const auto both = [](const std::string& a, const std::string& b) {
    dpb::check_distinct_outputs({{"--csv", a}, {"--dump-params", b}});
  };
  expect_error([&] { both(csv, csv); }, {"--csv and --dump-params", "'" + csv + "'"});
  fs::create_directory(dir.path / "sub");
  expect_error([&] { both(csv, dir.str() + "/sub/../s.csv"); }, {"--csv and --dump-params"});
  dpb::write_file_atomic(csv, "x\n");
  expect_error([&] { both(csv, dir.str() + "/./s.csv"); }, {"--csv and --dump-params"});
  fs::create_symlink(csv, dir.file("link.csv"));
  expect_error([&] { both(dir.file("link.csv"), csv); }, {"link.csv", "same file"});
  fs::create_hard_link(csv, dir.file("hard.csv"));
  expect_error([&] { both(csv, dir.file("hard.csv")); }, {"hard.csv"});
  fs::create_symlink("missing.bin", dir.file("dangling"));  // a link to a file yet to be written
  expect_error([&] { both(dir.file("missing.bin"), dir.file("dangling")); }, {"dangling"});
  EXPECT_NO_THROW(both(csv, dir.file("params.bin")));
  EXPECT_NO_THROW(both(csv, ""));  // an option not given
  EXPECT_NO_THROW(both("", ""));
  // A third option (the lead's --trace, --steps-csv) is compared with every other.
  expect_error([&] {
    dpb::check_distinct_outputs({{"--csv", csv}, {"--dump-params", ""}, {"--trace", csv}});
  }, {"--csv and --trace"});
}

// Issue 25: runs appending to one CSV at once lost rows (15 of 16 in 3 of 4 tries): each append
// reads, extends and renames over the file. Under the flock every row of every writer is kept.
TEST(Files, ConcurrentAppendsLoseNoRow) {
  TempDir dir;
  const std::string path = dir.file("shared.csv");
  constexpr int kWriters = 4, kRows = 50;
  std::vector<pid_t> kids;
  for (int w = 0; w < kWriters; ++w) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // a separate process, as two `dpbench train --csv` runs are
      int rc = 0;
      try {
        dpb::CsvAppender csv(path, kHeader);
        for (int i = 0; i < kRows; ++i) csv.append({std::to_string(w) + "," + std::to_string(i)});
      } catch (...) {
        rc = 1;
      }
      _exit(rc);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "writer failed: " << status;
  }
  const std::string text = dpb::read_file(path);
  std::istringstream in(text);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(line, kHeader);
  std::set<std::string> rows;
  while (std::getline(in, line)) EXPECT_TRUE(rows.insert(line).second) << "twice: " << line;
  EXPECT_EQ(rows.size(), size_t(kWriters * kRows)) << "rows lost";
  for (int w = 0; w < kWriters; ++w)
    for (int i = 0; i < kRows; ++i)
      EXPECT_TRUE(rows.count(std::to_string(w) + "," + std::to_string(i))) << w << "," << i;
  EXPECT_TRUE(others(dir, {"shared.csv"}).empty());  // no temporary file left
  // Threads of one process (separate opens) take turns alike.
  const std::string path2 = dir.file("threads.csv");
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w)
    threads.emplace_back([&, w] {
      for (int i = 0; i < kRows; ++i)
        dpb::append_csv_rows(path2, kHeader, {std::to_string(w) + "," + std::to_string(i)});
    });
  for (auto& t : threads) t.join();
  const std::string t2 = dpb::read_file(path2);
  EXPECT_EQ(std::count(t2.begin(), t2.end(), '\n'), 1 + kWriters * kRows);
}

}  // namespace
