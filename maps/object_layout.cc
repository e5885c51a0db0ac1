#include "maps/object_layout.h"

#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include <cerrno>
#include <memory>

#include "absl/strings/str_cat.h"
#include "userspace/common/errors.h"

namespace egressd::maps {
namespace {

using BtfPtr = std::unique_ptr<struct btf, decltype(&btf__free)>;
using ObjectPtr = std::unique_ptr<struct bpf_object, decltype(&bpf_object__close)>;

// The declared name of a map's key or value type, looking through const and
// volatile (a typedef such as __u64 keeps its own name).
std::string TypeName(const struct btf* btf, uint32_t id) {
  const struct btf_type* t = btf__type_by_id(btf, id);
  while (t && (btf_is_const(t) || btf_is_volatile(t))) t = btf__type_by_id(btf, t->type);
  if (!t) return "?";
  const std::string name = btf__name_by_offset(btf, t->name_off);
  if (btf_is_struct(t)) return "struct " + name;
  if (btf_is_union(t)) return "union " + name;
  return name;
}

absl::StatusOr<StructLayout> ReadStruct(const struct btf* btf, const std::string& name,
                                        const std::string& object_path) {
  const int id = btf__find_by_name_kind(btf, name.c_str(), BTF_KIND_STRUCT);
  if (id < 0) {
    return absl::NotFoundError(
        absl::StrCat("struct ", name, " is not in the BTF of ", object_path));
  }
  const struct btf_type* t = btf__type_by_id(btf, id);
  StructLayout layout{name, t->size, {}};
  const struct btf_member* m = btf_members(t);
  for (uint32_t i = 0; i < btf_vlen(t); ++i, ++m) {
    const std::string member = btf__name_by_offset(btf, m->name_off);
    if (btf_member_bitfield_size(t, i) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "struct ", name, " member ", member, " is a bitfield in ", object_path));
    }
    const int64_t size = btf__resolve_size(btf, m->type);
    if (size < 0) {
      return LibbpfStatus(size, absl::StrCat("size of struct ", name, " member ", member,
                                             " in ", object_path));
    }
    layout.members.push_back(
        {member, btf_member_bit_offset(t, i) / 8, static_cast<uint32_t>(size)});
  }
  return layout;
}

}  // namespace

absl::StatusOr<ObjectLayout> ReadObjectLayout(const std::string& object_path,
                                              const std::vector<std::string>& struct_names) {
  BtfPtr btf(btf__parse(object_path.c_str(), nullptr), btf__free);
  if (!btf) return LibbpfStatus(-errno, absl::StrCat("parse the BTF of ", object_path));
  ObjectLayout out;
  for (const std::string& name : struct_names) {
    EGR_ASSIGN_OR_RETURN(StructLayout s, ReadStruct(btf.get(), name, object_path));
    out.structs.emplace(name, std::move(s));
  }

  // Opening parses the map definitions; nothing reaches the kernel before load.
  ObjectPtr obj(bpf_object__open_file(object_path.c_str(), nullptr), bpf_object__close);
  if (!obj) return LibbpfStatus(-errno, absl::StrCat("open BPF object ", object_path));
  const struct btf* obj_btf = bpf_object__btf(obj.get());
  struct bpf_map* map;
  bpf_object__for_each_map(map, obj.get()) {
    if (bpf_map__is_internal(map)) continue;
    MapLayout m;
    m.name = bpf_map__name(map);
    m.type = bpf_map__type(map);
    m.key_size = bpf_map__key_size(map);
    m.value_size = bpf_map__value_size(map);
    m.max_entries = bpf_map__max_entries(map);
    if (obj_btf && bpf_map__btf_key_type_id(map))
      m.key_type = TypeName(obj_btf, bpf_map__btf_key_type_id(map));
    if (obj_btf && bpf_map__btf_value_type_id(map))
      m.value_type = TypeName(obj_btf, bpf_map__btf_value_type_id(map));
    out.maps.push_back(std::move(m));
  }
  return out;
}

}  // namespace egressd::maps
