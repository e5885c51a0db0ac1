// One table per enum that has names: parsing, printing and the list of valid
// values (for help text and "valid: ..." messages) all read the same rows, so
// a value added to the table is accepted, printed and listed everywhere.
//
//   constexpr EnumNames<Floor, 3> kFloors{{{
//       {Floor::kConnected, "connected"}, {Floor::kAirgapped, "airgapped"}, ...}}};
//   kFloors.Find("hosted");     // std::optional<Floor>
//   kFloors.Name(Floor::kHosted);  // "hosted"
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace egressd {

template <typename E>
struct EnumName {
  E value;
  std::string_view name;
};

template <typename E, size_t N>
struct EnumNames {
  std::array<EnumName<E>, N> rows;

  constexpr std::optional<E> Find(std::string_view name) const {
    for (const EnumName<E>& r : rows) {
      if (r.name == name) return r.value;
    }
    return std::nullopt;
  }

  // "unknown" for a value outside the table (a corrupt or newer value).
  constexpr std::string_view Name(E value) const {
    for (const EnumName<E>& r : rows) {
      if (r.value == value) return r.name;
    }
    return "unknown";
  }

  // The names in table order, each wrapped as open + name + close and
  // joined with `sep`: Join("\"", "\"", ", ") gives "\"a\", \"b\"".
  std::string Join(std::string_view open, std::string_view close,
                   std::string_view sep) const {
    std::string out;
    for (const EnumName<E>& r : rows) {
      if (!out.empty()) out += sep;
      out += open;
      out += r.name;
      out += close;
    }
    return out;
  }

  // Whether every value and every name appears once: checked at compile
  // time next to each table (static_assert), so a copy-paste row fails the
  // build instead of shadowing another.
  constexpr bool Unique() const {
    for (size_t i = 0; i < N; ++i) {
      for (size_t j = i + 1; j < N; ++j) {
        if (rows[i].value == rows[j].value || rows[i].name == rows[j].name) return false;
      }
    }
    return true;
  }
};

}  // namespace egressd
