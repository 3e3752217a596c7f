// The report's data and page: binning keeps spikes (RP-3), the page is whole
// and self-contained, and a failed write leaves nothing (RP-4).
#include "tools/report/report_page.hpp"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace troupe::report {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()))).string();
}

}  // namespace

TEST_CASE("a long run's series are binned with each bin's min and max kept (RP-3)", "[report]") {
  const std::string metrics = temp_path("report_long");
  {
    std::ofstream out(metrics);
    for (int step = 0; step < 5000; ++step)
      out << R"({"step":)" << step << R"(,"loss":)" << (step == 1234 ? 99.0 : 2.0) << R"(,"step_ms":10})" << "\n";
  }
  ReportInputs in;
  in.metrics = metrics;
  in.max_points = 100;
  auto data = report_data(in);
  std::filesystem::remove(metrics);
  REQUIRE(data);
  const auto& loss = (*data)["series"]["loss"];
  CHECK(loss["binned"] == true);
  CHECK(loss["points"] == 5000);
  CHECK(loss["x"].size() == 100);
  double top = 0;
  for (const auto& v : loss["hi"]) top = std::max(top, v.get<double>());
  CHECK(top == 99.0);  // the spike survives the binning
  CHECK((*data)["outcome"]["status"] == "cut short");  // no end line
  CHECK((*data)["schedule_note"].get<std::string>().find("no trace given") == 0);
  CHECK((*data)["heat"].is_null());
}

TEST_CASE("the page inlines its assets and its data cannot close the script that holds it", "[report]") {
  nlohmann::json data = {{"evil", "</script><script>alert(1)</script>"}};
  const std::string page = render_page(data);
  CHECK(page.find("/*@") == std::string::npos);  // every placeholder filled
  CHECK(page.find("@REPORT_DATA@") == std::string::npos);
  CHECK(page.find("Dygraph") != std::string::npos);
  CHECK(page.find("<\\/script><script>alert(1)<\\/script>") != std::string::npos);
  CHECK(page.find("src=\"http") == std::string::npos);  // nothing fetched at view time
}

TEST_CASE("a failed report is a one-line error naming the page, and leaves no file behind (RP-4)", "[report]") {
  const std::string metrics = temp_path("report_small");
  std::ofstream(metrics) << R"({"step":0,"loss":1})" << "\n";
  ReportInputs in;
  in.metrics = metrics;
  in.output = "/nonexistent-dir/report.html";
  auto st = write_report(in);
  REQUIRE_FALSE(st);
  CHECK(st.error().message.rfind("/nonexistent-dir/report.html: cannot create a temporary beside it", 0) == 0);
  // A trace that is not JSON leaves its section out, with the reason.
  const std::string trace = temp_path("report_trace");
  std::ofstream(trace) << "{ not json";
  in.trace = trace;
  in.output = temp_path("report_page") + ".html";
  REQUIRE(write_report(in));
  std::ifstream page(in.output);
  const std::string text((std::istreambuf_iterator<char>(page)), std::istreambuf_iterator<char>());
  CHECK(text.find("not JSON (a Chrome trace written by --trace): the step's schedule is left out") != std::string::npos);
  for (const auto& p : {metrics, trace, in.output}) std::filesystem::remove(p);
}

}  // namespace troupe::report
