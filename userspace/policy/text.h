// Small std::string_view helpers.  Abseil 20220623 (Debian 12) has its own
// absl::string_view, which std::string_view does not convert to, so the
// policy code splits and folds case with these instead of absl's.
#ifndef EGRESSD_USERSPACE_POLICY_TEXT_H_
#define EGRESSD_USERSPACE_POLICY_TEXT_H_

#include <string>
#include <string_view>
#include <vector>

namespace egressd::policy::text {

// Every piece, empty ones included: "a..b" gives {"a", "", "b"}.
inline std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t pos; (pos = s.find(sep, start)) != std::string_view::npos;
       start = pos + 1) {
    out.push_back(s.substr(start, pos - start));
  }
  out.push_back(s.substr(start));
  return out;
}

// Non-empty pieces between any of `seps`.
inline std::vector<std::string_view> SplitAny(std::string_view s,
                                              std::string_view seps) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start < s.size()) {
    size_t end = s.find_first_of(seps, start);
    if (end == std::string_view::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

inline char LowerAscii(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

inline std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = LowerAscii(c);
  return out;
}

inline std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return out;
}

inline bool IsDigit(char c) { return c >= '0' && c <= '9'; }
inline bool IsAlpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// Control and non-ASCII bytes as \xNN, the rest as is: for messages from
// libraries that may quote an input byte raw.
inline std::string EscapeControl(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace egressd::policy::text

#endif  // EGRESSD_USERSPACE_POLICY_TEXT_H_
