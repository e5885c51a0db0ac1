// The layouts a compiled BPF object declares, read from its BTF and its map
// definitions without loading it (no privileges, no kernel): what the ABI
// test compares with the C++ view of maps/egressd_abi.h, so the programs and
// the control plane cannot disagree on a struct.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace egressd::maps {

struct MemberLayout {
  std::string name;
  uint32_t offset = 0;  // bytes from the start of the struct
  uint32_t size = 0;    // bytes
};

struct StructLayout {
  std::string name;
  uint32_t size = 0;
  std::vector<MemberLayout> members;  // in declaration order
};

struct MapLayout {
  std::string name;
  uint32_t type = 0;  // enum bpf_map_type
  uint32_t key_size = 0;
  uint32_t value_size = 0;
  uint32_t max_entries = 0;
  std::string key_type;    // as declared: "__u64", "struct egr_lpm4_key"
  std::string value_type;
};

struct ObjectLayout {
  std::map<std::string, StructLayout> structs;  // by struct name
  std::vector<MapLayout> maps;                  // declared maps, not .data/.bss/.rodata
};

// Reads the named structs from the object's BTF and every map it declares.
// A struct the BTF lacks, or a bitfield member (the ABI has none), is an
// error naming the struct and the object.
absl::StatusOr<ObjectLayout> ReadObjectLayout(const std::string& object_path,
                                              const std::vector<std::string>& struct_names);

}  // namespace egressd::maps
