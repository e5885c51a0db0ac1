#include "kernel_figures.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "lab.h"
#include "nlohmann/json.hpp"

namespace egressd::bench {
namespace {

using nlohmann::json;

lab::RunResult Bpftool(std::vector<std::string> args) {
  lab::RunSpec spec;
  spec.argv = {"bpftool", "-j"};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  return lab::Run(spec);
}

std::vector<std::string> Pins(const std::string& pin_root) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(pin_root, ec)) {
    if (!entry.is_directory(ec)) out.push_back(entry.path().string());
  }
  return out;
}

}  // namespace

std::map<std::string, std::pair<double, double>> ProgStats(const std::string& pin_root) {
  std::map<std::string, std::pair<double, double>> out;
  for (const std::string& pin : Pins(pin_root)) {
    lab::RunResult link = Bpftool({"link", "show", "pinned", pin});
    if (link.exit_code != 0) continue;  // a map
    const json l = json::parse(link.out, nullptr, false);
    if (l.is_discarded() || !l.contains("prog_id")) continue;
    lab::RunResult prog = Bpftool({"prog", "show", "id", std::to_string(l["prog_id"].get<long>())});
    const json j = json::parse(prog.out, nullptr, false);
    if (j.is_discarded() || !j.contains("run_cnt")) continue;
    auto& v = out[j.value("name", std::filesystem::path(pin).filename().string())];
    v.first += j.value("run_time_ns", 0.0);
    v.second += j.value("run_cnt", 0.0);
  }
  return out;
}

std::map<std::string, std::pair<double, double>> PinnedProgStats(const std::string& dir) {
  std::map<std::string, std::pair<double, double>> out;
  for (const std::string& pin : Pins(dir)) {
    lab::RunResult prog = Bpftool({"prog", "show", "pinned", pin});
    const json j = json::parse(prog.out, nullptr, false);
    if (prog.exit_code != 0 || j.is_discarded() || !j.contains("run_cnt")) continue;
    auto& v = out[j.value("name", std::filesystem::path(pin).filename().string())];
    v.first += j.value("run_time_ns", 0.0);
    v.second += j.value("run_cnt", 0.0);
  }
  return out;
}

void AddProgStats(std::map<std::string, std::pair<double, double>>& total,
                  const std::map<std::string, std::pair<double, double>>& before,
                  const std::map<std::string, std::pair<double, double>>& after) {
  for (const auto& [name, v] : after) {
    auto b = before.find(name);
    const std::pair<double, double> base = b == before.end() ? std::pair<double, double>{0, 0} : b->second;
    total[name].first += v.first - base.first;
    total[name].second += v.second - base.second;
  }
}

double MapMemlockBytes(const std::string& pin_root) {
  double sum = 0;
  for (const std::string& pin : Pins(pin_root)) {
    lab::RunResult map = Bpftool({"map", "show", "pinned", pin});
    if (map.exit_code != 0) continue;  // a link
    const json j = json::parse(map.out, nullptr, false);
    if (!j.is_discarded()) sum += j.value("bytes_memlock", 0.0);
  }
  return sum;
}

KernelMemory ReadKernelMemory() {
  KernelMemory m;
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (in >> key >> kb) {
    std::getline(in, unit);
    if (key == "Slab:") m.slab = kb * 1024;
    if (key == "SReclaimable:") m.sreclaimable = kb * 1024;
    if (key == "SUnreclaim:") m.sunreclaim = kb * 1024;
    if (key == "Percpu:") m.percpu = kb * 1024;
  }
  return m;
}

}  // namespace egressd::bench
