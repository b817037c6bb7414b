// test_files.cpp: result files (src/core/files.h): output paths refused before any work with the
// user's path in the message, symlinks followed, read-only files refused, permissions kept, CSV
// rows appended atomically with no temporary file left. Run: ./dpb_tests --gtest_filter='Files*'
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <string>

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

}  // namespace
