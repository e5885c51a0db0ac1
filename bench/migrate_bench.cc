// Issue 15's figure: how long a load takes to migrate 100k learned addresses
// from the egr_resolved_v1 layout (tests/priv/old_layouts.h) to
// egr_resolved_v2: the migration alone (from the first read of the old map
// to its unpin: fill, link swaps, commit, leveling, self-test) and the whole
// load (with the verifier's time).  An instance of its own, in this process's
// netns, unloaded at the end.  Prints a markdown table; --out FILE.json.
//   migrate_bench [--quick] [--entries N] [--runs R] [--out FILE]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "loader/loader.h"
#include "old_layouts.h"
#include "userspace/common/instance_lock.h"

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  size_t entries = 100000;
  int runs = 3;
  std::string out;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") {
      entries = 10000;
      runs = 1;
    } else if (a == "--entries" && i + 1 < argc && absl::SimpleAtoi(argv[i + 1], &entries) && entries > 0) {
      ++i;
    } else if (a == "--runs" && i + 1 < argc && absl::SimpleAtoi(argv[i + 1], &runs) && runs > 0) {
      ++i;
    } else if (a == "--out" && i + 1 < argc) {
      out = argv[++i];
    } else {
      std::fprintf(stderr, "migrate_bench: bad argument \"%s\" (usage: [--quick] [--entries N] [--runs R] [--out FILE])\n", a.c_str());
      return 2;
    }
  }
  spdlog::set_level(spdlog::level::err);  // the table alone on stdout
  egressd::Paths paths;
  paths.pin_root = absl::StrCat("/sys/fs/bpf/egr-bench-migrate-", getpid());
  paths.runtime_dir = absl::StrCat("/run/egr-bench-migrate-", getpid());
  paths.node_netns = "/proc/self/ns/net";
  auto lock = egressd::InstanceLock::Acquire(paths);
  if (!lock.ok()) {
    std::fprintf(stderr, "migrate_bench: %s\n", std::string(lock.status().message()).c_str());
    return 1;
  }
  int rc = 0;
  std::vector<double> migration_s, load_s, stage_s;
  size_t carried = 0;
  for (int r = 0; r < runs && rc == 0; ++r) {
    auto first = egressd::LoadEnforcement(paths, *lock);
    if (!first.ok()) {
      std::fprintf(stderr, "migrate_bench: load: %s\n", std::string(first.status().message()).c_str());
      rc = 1;
      break;
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto learned = egressd::test::old_layout::Synthetic(entries, egressd::test::old_layout::BootNs() + 3600'000'000'000ull);
    auto live = egressd::test::old_layout::StageOldResolvedState(paths.pin_root, learned);
    if (!live.ok()) {
      std::fprintf(stderr, "migrate_bench: %s\n", std::string(live.status().message()).c_str());
      rc = 1;
      break;
    }
    close(*live);
    const auto t1 = std::chrono::steady_clock::now();
    auto second = egressd::LoadEnforcement(paths, *lock);
    const auto t2 = std::chrono::steady_clock::now();
    if (!second.ok() || second->migrations.empty()) {
      std::fprintf(stderr, "migrate_bench: migrating load: %s\n",
                   second.ok() ? "no migration ran" : std::string(second.status().message()).c_str());
      rc = 1;
      break;
    }
    carried = second->migrations[0].carried;
    if (carried != entries) {
      std::fprintf(stderr, "migrate_bench: %zu of %zu addresses carried\n", carried, entries);
      rc = 1;
    }
    stage_s.push_back(std::chrono::duration<double>(t1 - t0).count());
    migration_s.push_back(second->migrations[0].seconds);
    load_s.push_back(std::chrono::duration<double>(t2 - t1).count());
    if (auto u = egressd::UnloadEnforcement(paths, *lock, /*force=*/true); !u.ok()) {
      std::fprintf(stderr, "migrate_bench: unload: %s\n", std::string(u.message()).c_str());
      rc = 1;
    }
  }
  (void)egressd::UnloadEnforcement(paths, *lock, /*force=*/true);
  std::error_code ec;
  std::filesystem::remove_all(paths.runtime_dir, ec);  // its lock file: the instance is gone
  if (rc != 0) return rc;
  std::printf("| learned addresses | runs | migration (fill, swap, level, self-test, unpin) | whole load | building the old state (test side) |\n");
  std::printf("|---:|---:|---:|---:|---:|\n");
  std::printf("| %zu | %d | %.3f s | %.3f s | %.3f s |\n", entries, runs, Median(migration_s), Median(load_s),
              Median(stage_s));
  if (!out.empty()) {
    nlohmann::json j = {{"entries", entries}, {"runs", runs}, {"migration_s", migration_s},
                        {"load_s", load_s}, {"stage_s", stage_s}};
    std::ofstream(out) << j.dump(2) << "\n";
  }
  return 0;
}
