#include "runtime/data/token_file.hpp"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <vector>

namespace troupe {

TEST_CASE("token files round-trip and reject what is not one", "[token_file]") {
  auto dir = std::filesystem::temp_directory_path() / ("troupe_tok_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = (dir / "t.bin").string();
  std::vector<std::uint8_t> bytes{0, 1, 255, 65, 10};
  REQUIRE(write_token_file(path, bytes).ok());
  auto f = TokenFile::open(path);
  REQUIRE(f.ok());
  CHECK(f->size() == 5);
  CHECK(f->width() == 1);
  CHECK(f->at(2) == 255);
  std::int32_t out[3];
  f->read(2, 3, out);
  CHECK(out[0] == 255);
  CHECK(out[2] == 10);

  const auto bad = (dir / "bad.bin").string();
  std::ofstream(bad) << "this is plain text, not a token file at all";
  auto b = TokenFile::open(bad);
  REQUIRE_FALSE(b.ok());
  CHECK(b.error().message.find("bad magic") != std::string::npos);

  // A header that promises more tokens than the file holds.
  std::filesystem::resize_file(path, 32 + 3);
  auto t = TokenFile::open(path);
  REQUIRE_FALSE(t.ok());
  CHECK(t.error().message.find("truncated") != std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace troupe
