// Golden pictures for small cases, checked by eye once and frozen here; and the
// JSON and Chrome views' structure.
#include "schedules/render.hpp"

#include <catch2/catch.hpp>

namespace troupe::schedules {
namespace {

std::string picture(Kind k, int p, int m, int v, double f, double b, double w) {
  const Costs c{f, b, w, 0.0};
  auto s = *build_schedule(k, p, m, v);
  auto sim = *simulate(s, c);
  return render_ascii(s, sim, c);
}

}  // namespace

TEST_CASE("1f1b p=4 m=8: the picture from the papers", "[schedules][render]") {
  const std::string got = picture(Kind::one_f_one_b, 4, 8, 1, 1, 1, 0);
  CHECK(got ==
        "stage 0 | F0 F1 F2 F3 .  .  .  B0 F4 B1 F5 B2 F6 B3 F7 B4 .  B5 .  B6 .  B7\n"
        "stage 1 | .  F0 F1 F2 .  .  B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 .  B6 .  B7 .\n"
        "stage 2 | .  .  F0 F1 .  B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 .  B7 .  .\n"
        "stage 3 | .  .  .  F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 .  .  .\n"
        "1f1b p=4 m=8 v=1: step time 22, bubble fraction 0.2727\n"
        "peak activations per stage: 4 3 2 1\n");
}

TEST_CASE("zb-h1 p=4 m=8: W fills the cool-down", "[schedules][render]") {
  const std::string got = picture(Kind::zb_h1, 4, 8, 1, 1, 1, 1);
  CHECK(got ==
        "stage 0 | F0 F1 F2 F3 .  .  .  B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7\n"
        "stage 1 | .  F0 F1 F2 .  .  B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 B7 W6 W7\n"
        "stage 2 | .  .  F0 F1 .  B0 F2 B1 F3 B2 W0 F4 B3 W1 F5 B4 W2 F6 B5 W3 F7 B6 W4 B7 W5 W6 W7\n"
        "stage 3 | .  .  .  F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7\n"
        "zb-h1 p=4 m=8 v=1: step time 27, bubble fraction 0.1111\n"
        "peak activations per stage: 4 3 2 1\n");
}

TEST_CASE("gpipe p=3 m=4 with a backward twice the forward", "[schedules][render]") {
  const std::string got = picture(Kind::gpipe, 3, 4, 1, 1, 2, 0);
  CHECK(got ==
        "stage 0 | F0 F1 F2 F3 .  .  .  .  .  .  B0 B0 B1 B1 B2 B2 B3 B3\n"
        "stage 1 | .  F0 F1 F2 F3 .  .  .  B0 B0 B1 B1 B2 B2 B3 B3 .  .\n"
        "stage 2 | .  .  F0 F1 F2 F3 B0 B0 B1 B1 B2 B2 B3 B3 .  .  .  .\n"
        "gpipe p=3 m=4 v=1: step time 18, bubble fraction 0.3333\n"
        "peak activations per stage: 4 4 4\n");
}

TEST_CASE("interleaved p=2 m=4 v=2 labels chunks", "[schedules][render]") {
  const std::string got = picture(Kind::interleaved_1f1b, 2, 4, 2, 1, 1, 0);
  CHECK(got ==
        "stage 0 | F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 .    B2.1 .    B3.1 B2.0 B3.0\n"
        "stage 1 | .    F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0 .\n"
        "interleaved-1f1b p=2 m=4 v=2: step time 18, bubble fraction 0.1111\n"
        "peak activations per stage: 5 3\n");
}

TEST_CASE("json and chrome views carry every instruction and span", "[schedules][render]") {
  auto s = *build_schedule(Kind::one_f_one_b, 3, 5);
  auto sim = *simulate(s, Costs{1, 2, 0, 0.25});
  auto j = render_json(s, sim, Costs{1, 2, 0, 0.25});
  CHECK(j["kind"] == "1f1b");
  CHECK(j["programs"].size() == 3);
  CHECK(j["programs"][1].size() == s.programs[1].size());
  CHECK(j["programs"][0].back()["op"] == "optimizer_step");
  CHECK(j["simulation"]["step_time"].get<double>() == sim.step_time);
  auto c = render_chrome(s, sim);
  int spans = 0, names = 0;
  for (auto& e : c["traceEvents"]) {
    if (e["ph"] == "X") {
      ++spans;
      CHECK(e["dur"].get<double>() > 0);
    }
    if (e["ph"] == "M") ++names;
  }
  CHECK(names == 3);
  CHECK(spans == 3 * 5 * 2);
}

}  // namespace troupe::schedules
