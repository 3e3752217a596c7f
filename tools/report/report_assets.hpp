// The report page's assets, embedded at build time (embed_assets.cmake).
#pragma once

namespace troupe::report {

extern const char kReportHtml[];  ///< the page, with /*@...@*/ placeholders and @REPORT_DATA@
extern const char kReportCss[];
extern const char kReportJs[];
extern const char kDygraphJs[];   ///< Debian's libjs-dygraphs, dygraph.min.js
extern const char kDygraphCss[];

}  // namespace troupe::report
