// Errors as values: Error, Expected<T> and Status, the vocabulary every layer
// returns. Not exceptions: nothing here throws (std::expected arrives in C++23).
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace troupe {

/// Where a failure began: here, or at a peer whose failure this one only
/// reports (a transfer with a rank that failed first). A job's failure is
/// reported by its root cause, so `peer` failures give way to `here` ones.
enum class Origin : unsigned char { here, peer };

/// What went wrong, in one line that names the file, key, flag or call.
struct Error {
  std::string message;
  Origin origin = Origin::here;
};

/// Either a T or the Error that prevented it.
template <class T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}
  Expected(Error error) : v_(std::move(error)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { assert(ok()); return std::get<0>(v_); }
  const T& value() const& { assert(ok()); return std::get<0>(v_); }
  T&& value() && { assert(ok()); return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { assert(!ok()); return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

/// Success, or the Error that stopped it.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), failed_(true) {}
  static Status success() { return {}; }

  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const Error& error() const { assert(failed_); return error_; }

 private:
  Error error_;
  bool failed_ = false;
};

/// An Error whose message is the concatenation of `parts`.
template <class... Parts>
Error make_error(Parts&&... parts) {
  std::string message;
  ((message += std::forward<Parts>(parts)), ...);
  return Error{std::move(message), Origin::here};
}

/// make_error for a failure that is the consequence of a peer's (Origin::peer).
template <class... Parts>
Error make_peer_error(Parts&&... parts) {
  Error e = make_error(std::forward<Parts>(parts)...);
  e.origin = Origin::peer;
  return e;
}

}  // namespace troupe

/// Returns the error of a failed Status/Expected expression from the caller.
#define TROUPE_TRY(expr)                         \
  do {                                           \
    auto troupe_try_result_ = (expr);            \
    if (!troupe_try_result_.ok())                \
      return troupe_try_result_.error();         \
  } while (0)
