// The job's key for control messages (see message_key.hpp).
#include "common/message_key.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <atomic>
#include <mutex>

namespace troupe {
namespace {

std::mutex key_mutex;
std::string installed_key;  // guarded by key_mutex
std::atomic<std::uint64_t> refused{0};

std::string current_key() {
  std::lock_guard lock(key_mutex);
  return installed_key;
}

}  // namespace

void install_message_key(std::string key) {
  std::lock_guard lock(key_mutex);
  installed_key = std::move(key);
}

void forget_message_key() { install_message_key(""); }

std::string message_mac(std::string_view type, const void* bytes, std::size_t size) {
  const std::string key = current_key();
  if (key.empty()) return {};
  std::string data(type);
  data.push_back('\0');
  data.append(static_cast<const char*>(bytes), size);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  const bool ok = HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
                       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &length) != nullptr;
  return ok ? std::string(reinterpret_cast<const char*>(out), length) : std::string(32, '\0');
}

bool macs_equal(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::uint64_t count_unauthenticated() { return refused.fetch_add(1) + 1; }
std::uint64_t unauthenticated_messages() { return refused.load(); }

}  // namespace troupe
