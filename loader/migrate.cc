#include "loader/migrate.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>

#include <spdlog/spdlog.h>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "maps/egressd_abi.h"
#include "userspace/common/errors.h"

namespace egressd {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool Exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

std::vector<std::string> Entries(const std::string& dir, bool dirs) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      if ((e->d_type == DT_DIR) == dirs) out.push_back(n);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The ids of the maps the programs behind the pinned links use: which of two
// maps of one role is the one in force.
absl::flat_hash_set<uint32_t> MapsInForce(const std::string& pin_root) {
  absl::flat_hash_set<uint32_t> ids;
  const std::string dir = pin_root + "/links";
  for (const auto& name : Entries(dir, false)) {
    UniqueFd link(bpf_obj_get((dir + "/" + name).c_str()));
    if (!link.valid()) continue;
    bpf_link_info li{};
    uint32_t len = sizeof(li);
    if (bpf_obj_get_info_by_fd(link.get(), &li, &len) != 0) continue;
    UniqueFd prog(bpf_prog_get_fd_by_id(li.prog_id));
    if (!prog.valid()) continue;
    bpf_prog_info pi{};
    len = sizeof(pi);
    if (bpf_obj_get_info_by_fd(prog.get(), &pi, &len) != 0 || pi.nr_map_ids == 0) continue;
    std::vector<uint32_t> map_ids(pi.nr_map_ids);
    const uint32_t n = pi.nr_map_ids;
    pi = {};
    pi.nr_map_ids = n;
    pi.map_ids = reinterpret_cast<uint64_t>(map_ids.data());
    len = sizeof(pi);
    if (bpf_obj_get_info_by_fd(prog.get(), &pi, &len) != 0) continue;
    for (uint32_t i = 0; i < std::min(n, pi.nr_map_ids); ++i) ids.insert(map_ids[i]);
  }
  return ids;
}

std::optional<uint32_t> MapId(const std::string& pin) {
  UniqueFd fd(bpf_obj_get(pin.c_str()));
  if (!fd.valid()) return std::nullopt;
  bpf_map_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(fd.get(), &info, &len) != 0) return std::nullopt;
  return info.id;
}

absl::StatusOr<std::optional<uint32_t>> PinnedSchema(const std::string& pin_root) {
  const std::string pin = pin_root + "/" + EGR_MAP_CONFIG;
  if (!Exists(pin)) return std::optional<uint32_t>();
  UniqueFd fd(bpf_obj_get(pin.c_str()));
  if (!fd.valid()) return ErrnoStatus(errno, absl::StrCat("open pinned map ", pin));
  uint32_t zero = 0;
  egr_config_val cfg{};
  if (bpf_map_lookup_elem(fd.get(), &zero, &cfg) != 0) return ErrnoStatus(errno, absl::StrCat("read ", pin));
  return std::optional<uint32_t>(cfg.pad0);
}

void RemoveStaging(const std::string& dir, const char* why) {
  for (const auto& n : Entries(dir, false)) {
    const std::string pin = dir + "/" + n;
    if (unlink(pin.c_str()) == 0) spdlog::warn("removed {} ({})", pin, why);
  }
  rmdir(dir.c_str());
}

}  // namespace

std::string StagingDir(const Paths& paths) { return paths.pin_root + "/staging"; }

absl::StatusOr<MigrationPlan> MigrationPlan::Prepare(const Paths& paths, bpf_object* obj) {
  MigrationPlan plan;
  plan.pin_root_ = paths.pin_root;
  // An interrupted migration's staging maps were never the only copy of
  // anything: their old maps are still pinned (unpinned last), so the
  // migration is redone from those.
  RemoveStaging(StagingDir(paths), "a staging pin of an interrupted migration");

  const std::vector<MapShape> declared = DeclaredPinnedShapes(obj);
  const std::vector<std::string> pinned = Entries(paths.pin_root, false);
  auto pinned_here = [&](const std::string& n) { return std::find(pinned.begin(), pinned.end(), n) != pinned.end(); };

  // Shapes first: the schema is read out of the config map only once it is
  // known to be the config map this build reads.
  for (const auto& d : declared) {
    if (!pinned_here(d.name)) continue;
    const std::string pin = paths.pin_root + "/" + d.name;
    EGR_ASSIGN_OR_RETURN(MapShape found, PinnedShape(pin));
    EGR_RETURN_IF_ERROR(CompareShape(d, found, pin));
  }
  EGR_ASSIGN_OR_RETURN(std::optional<uint32_t> schema, PinnedSchema(paths.pin_root));
  EGR_RETURN_IF_ERROR(CheckNotNewer(pinned, declared, schema, paths.pin_root));

  std::optional<absl::flat_hash_set<uint32_t>> in_force;
  std::vector<std::string> abandoned;  // new maps of a migration the links never took
  for (const auto& d : declared) {
    std::vector<const Migration*> from;
    for (const Migration* m : Migrations()) {
      if (d.name == m->to && pinned_here(m->from)) from.push_back(m);
    }
    if (from.empty()) continue;
    for (const Migration* m : from) {
      const std::string pin = paths.pin_root + "/" + m->from;
      EGR_ASSIGN_OR_RETURN(MapShape found, PinnedShape(pin));
      EGR_RETURN_IF_ERROR(CompareShape(m->from_shape, found, pin));
    }
    const std::string final_pin = paths.pin_root + "/" + d.name;
    bool redo = !pinned_here(d.name);
    if (!redo) {
      // Both pinned: a migration stopped after its commit.  If a link's
      // program still reads the old map, the links went back (or never
      // moved): the new pin is dropped and the migration redone.  Else the
      // new map is in force and only the old pin is left to remove.
      if (!in_force) in_force = MapsInForce(paths.pin_root);
      auto old_id = MapId(paths.pin_root + "/" + from.front()->from);
      if (old_id && in_force->contains(*old_id)) {
        abandoned.push_back(final_pin);
        redo = true;
      }
    }
    if (!redo) {
      for (const Migration* m : from) plan.retire_.push_back(paths.pin_root + "/" + m->from);
      continue;
    }
    Step s;
    s.m = from.front();  // the newest old layout present
    s.from_pin = paths.pin_root + "/" + s.m->from;
    s.staging_pin = StagingDir(paths) + "/" + d.name;
    s.final_pin = final_pin;
    s.report.from = s.m->from;
    s.report.to = d.name;
    plan.steps_.push_back(std::move(s));
    for (size_t i = 1; i < from.size(); ++i) plan.retire_.push_back(paths.pin_root + "/" + from[i]->from);
  }

  // Every check passed: now the node may change.
  for (const auto& pin : abandoned) {
    if (unlink(pin.c_str()) != 0) return ErrnoStatus(errno, absl::StrCat("remove ", pin, " (an abandoned migration's map)"));
    spdlog::warn("removed {}: a migration's map the programs never took (the old map is in force)", pin);
  }
  if (!plan.steps_.empty()) {
    if (mkdir(StagingDir(paths).c_str(), 0700) != 0 && errno != EEXIST) {
      return ErrnoStatus(errno, absl::StrCat("create ", StagingDir(paths)));
    }
  }
  for (const auto& s : plan.steps_) {
    bpf_map* map = bpf_object__find_map_by_name(obj, s.report.to.c_str());
    if (map == nullptr) return absl::InternalError(absl::StrCat("the object declares no map ", s.report.to));
    if (int r = bpf_map__set_pin_path(map, s.staging_pin.c_str()); r != 0) {
      return LibbpfStatus(r, absl::StrCat("stage ", s.report.to, " at ", s.staging_pin));
    }
    spdlog::info("migrating {} -> {} ({}) through {}", s.m->from, s.report.to, s.m->note, s.staging_pin);
  }
  return plan;
}

absl::Status MigrationPlan::Fill(bpf_object* obj) {
  for (auto& s : steps_) {
    s.started = Now();
    bpf_map* map = bpf_object__find_map_by_name(obj, s.report.to.c_str());
    s.to_fd = map != nullptr ? bpf_map__fd(map) : -1;
    if (s.to_fd < 0) return absl::InternalError(absl::StrCat("no fd for the staged map ", s.report.to));
    s.from_fd.reset(bpf_obj_get(s.from_pin.c_str()));
    if (!s.from_fd.valid()) return ErrnoStatus(errno, absl::StrCat("open ", s.from_pin, " to migrate it"));
    if (s.m->carry == nullptr) continue;
    auto n = s.m->carry(s.from_fd.get(), s.to_fd);
    if (!n.ok()) {
      return absl::Status(n.status().code(), absl::StrCat("migrate ", s.m->from, " -> ", s.report.to, ": ",
                                                          n.status().message()));
    }
    s.report.carried = *n;
  }
  return absl::OkStatus();
}

absl::Status MigrationPlan::Commit() {
  for (auto& s : steps_) {
    if (rename(s.staging_pin.c_str(), s.final_pin.c_str()) != 0) {
      return ErrnoStatus(errno, absl::StrCat("rename ", s.staging_pin, " to ", s.final_pin));
    }
    s.committed = true;
  }
  if (!steps_.empty()) rmdir((pin_root_ + "/staging").c_str());
  for (auto& s : steps_) {
    if (s.m->level == nullptr) continue;
    auto n = s.m->level(s.from_fd.get(), s.to_fd);
    if (!n.ok()) {
      return absl::Status(n.status().code(), absl::StrCat("level ", s.report.to, " with ", s.m->from, ": ",
                                                          n.status().message()));
    }
    s.report.leveled = *n;
  }
  return absl::OkStatus();
}

void MigrationPlan::Abandon() {
  for (auto& s : steps_) {
    const std::string& pin = s.committed ? s.final_pin : s.staging_pin;
    if (unlink(pin.c_str()) == 0) spdlog::warn("migration {} -> {} undone: {} removed, {} kept", s.m->from, s.report.to, pin, s.from_pin);
  }
  rmdir((pin_root_ + "/staging").c_str());
}

absl::StatusOr<std::vector<MigrationReport>> MigrationPlan::Finish() {
  std::vector<MigrationReport> out;
  for (auto& s : steps_) {
    if (unlink(s.from_pin.c_str()) != 0) return ErrnoStatus(errno, absl::StrCat("unpin the migrated ", s.from_pin));
    s.report.seconds = Now() - s.started;
    spdlog::info("migrated {} -> {}: {} entries carried, {} forgotten since (deleted from the copy), {:.3f} s; {} unpinned",
                 s.m->from, s.report.to, s.report.carried, s.report.leveled, s.report.seconds, s.from_pin);
    out.push_back(s.report);
  }
  for (const auto& pin : retire_) {
    if (unlink(pin.c_str()) != 0 && errno != ENOENT) return ErrnoStatus(errno, absl::StrCat("unpin ", pin));
    spdlog::info("unpinned {}: an older layout of a map already migrated", pin);
  }
  return out;
}

}  // namespace egressd

namespace egressd {

absl::Status CheckAdoptable(const Paths& paths, const bpf_object* obj) {
  for (const auto& d : DeclaredPinnedShapes(obj)) {
    const std::string pin = paths.pin_root + "/" + d.name;
    EGR_ASSIGN_OR_RETURN(MapShape found, PinnedShape(pin));
    EGR_RETURN_IF_ERROR(CompareShape(d, found, pin));
  }
  EGR_ASSIGN_OR_RETURN(std::optional<uint32_t> schema, PinnedSchema(paths.pin_root));
  if (schema.value_or(0) != kPinSchema) {
    return PinnedStateError(absl::StrCat("the pinned schema is ", schema.value_or(0), ", this egressd's is ",
                                         kPinSchema));
  }
  for (const Migration* m : Migrations()) {
    if (Exists(paths.pin_root + "/" + m->from)) {
      return PinnedStateError(absl::StrCat(paths.pin_root, "/", m->from, " is pinned: a migration to ", m->to,
                                           " is pending"));
    }
  }
  return absl::OkStatus();
}

}  // namespace egressd
