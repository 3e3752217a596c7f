// encode_endpoint / decode_endpoint.
#include "runtime/control/endpoint.hpp"


#include "common/decimal.hpp"
#include "common/printable.hpp"
#include "runtime/config/failure_domains.hpp"

namespace troupe {
namespace {

constexpr const char* kHeader = "troupe-endpoint 2";
constexpr std::size_t kMaxAddress = 64 * 1024;
constexpr std::size_t kMaxLine = 1024;

// Reads lines and byte runs from the front of `bytes`, never past its end.
class Reader {
 public:
  explicit Reader(const std::string& bytes) : s_(bytes) {}
  bool line(std::string& out) {
    const auto nl = s_.find('\n', pos_);
    if (nl == std::string::npos || nl - pos_ > kMaxLine) return false;
    out = s_.substr(pos_, nl - pos_);
    pos_ = nl + 1;
    return true;
  }
  bool bytes(std::size_t n, std::string& out) {
    if (n > s_.size() - pos_) return false;
    out = s_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool at_end() const { return pos_ == s_.size(); }

 private:
  const std::string& s_;
  std::size_t pos_ = 0;
};

// A number as encode_endpoint writes it: parse_decimal, without a leading zero.
template <class T>
bool number(const std::string& text, T& out) {
  return !(text.size() > 1 && text[0] == '0') && parse_decimal(text, out);
}

}  // namespace

std::string encode_endpoint(const NodeEndpoint& e) {
  std::string out = kHeader;
  out.append("\n").append(e.host).append(":").append(std::to_string(e.port)).append("\n");
  out.append(e.system_id).append("\n").append(e.domain).append("\n");
  out.append(std::to_string(e.ucx.size())).append("\n");
  for (auto& a : e.ucx) out.append(std::to_string(a.size())).append("\n").append(a);
  return out;
}

Expected<NodeEndpoint> decode_endpoint(const std::string& bytes, const std::string& who, int max_actors) {
  auto bad = [&](const std::string& what) {
    return make_error("rendezvous: ", who, " published a malformed endpoint (", what, ")");
  };
  Reader in(bytes);
  std::string line;
  if (!in.line(line) || line != kHeader) return bad("no header");
  NodeEndpoint e;
  if (!in.line(line)) return bad("no host:port");
  const auto colon = line.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad("no host:port in '" + printable(line) + "'");
  e.host = line.substr(0, colon);
  for (unsigned char c : e.host)
    if (c <= 0x20 || c >= 0x7f) return bad("host '" + printable(e.host) + "'");
  std::uint32_t port = 0;
  if (!number(line.substr(colon + 1), port) || port == 0 || port > 65535)
    return bad("port '" + printable(line.substr(colon + 1)) + "'");
  e.port = static_cast<std::uint16_t>(port);
  if (!in.line(e.system_id) || e.system_id.empty()) return bad("no system id");
  if (!in.line(e.domain) || !check_domain_name(e.domain, "")) return bad("failure domain");
  int k = 0;
  if (!in.line(line) || !number(line, k) || k < 0 || k > max_actors) return bad("actor count");
  for (int i = 0; i < k; ++i) {
    std::size_t n = 0;
    std::string address;
    if (!in.line(line) || !number(line, n) || n == 0 || n > kMaxAddress) return bad("address length");
    if (!in.bytes(n, address)) return bad("truncated address");
    e.ucx.push_back(std::move(address));
  }
  if (!in.at_end()) return bad("trailing bytes");
  return e;
}

}  // namespace troupe
