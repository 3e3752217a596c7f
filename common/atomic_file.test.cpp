#include "common/atomic_file.hpp"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace troupe {

TEST_CASE("an atomic write replaces the file whole, and a failed one leaves it alone", "[atomic_file]") {
  namespace fs = std::filesystem;
  auto dir = fs::temp_directory_path() / ("troupe_atomic_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto path = (dir / "f.txt").string();
  REQUIRE(write_file_atomically(path, [](std::ostream& o) { o << "first"; }).ok());
  REQUIRE(write_file_atomically(path, [](std::ostream& o) { o << "second"; }).ok());
  auto read = [&] {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  CHECK(read() == "second");
  // The writer fails half way: the old contents stay and no temporary remains.
  auto st = write_file_atomically(path, [](std::ostream& o) {
    o << "par";
    o.setstate(std::ios::badbit);
  });
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message.find(path) != std::string::npos);
  CHECK(read() == "second");
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}) == 1);
  CHECK_FALSE(write_file_atomically((dir / "missing" / "f").string(), [](std::ostream&) {}).ok());
  fs::remove_all(dir);
}

}  // namespace troupe

namespace troupe {

TEST_CASE("an atomic write never follows a symlink planted at a temporary's name", "[atomic_file]") {
  namespace fs = std::filesystem;
  auto dir = fs::temp_directory_path() / ("troupe_atomic_link_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto victim = (dir / "victim.txt").string();
  std::ofstream(victim) << "keep";
  // The old scheme wrote to PATH.tmp.<pid>: plant links at every name it could pick.
  const auto path = (dir / "out.txt").string();
  fs::create_symlink(victim, path + ".tmp." + std::to_string(::getpid()));
  REQUIRE(write_file_atomically(path, [](std::ostream& o) { o << "new"; }).ok());
  std::ifstream in(victim);
  std::string s;
  in >> s;
  CHECK(s == "keep");
  fs::remove_all(dir);
}

}  // namespace troupe
