// What the kernel says about the enforcers: ns per program run
// (kernel.bpf_stats_enabled), the memory of an instance's maps, and the
// node's kernel memory (/proc/meminfo), read the same way for both enforcers.
#pragma once

#include <map>
#include <string>
#include <utility>

namespace egressd::bench {

// run_time_ns and run_cnt, by program name, of the programs behind the links
// pinned under pin_root.
std::map<std::string, std::pair<double, double>> ProgStats(const std::string& pin_root);

// The same for programs pinned as programs (not links) under dir: the tc
// programs a load pins at <pin_root>/progs, attached by netlink filters.
std::map<std::string, std::pair<double, double>> PinnedProgStats(const std::string& dir);

// Accumulates the difference of two ProgStats into total.
void AddProgStats(std::map<std::string, std::pair<double, double>>& total,
                  const std::map<std::string, std::pair<double, double>>& before,
                  const std::map<std::string, std::pair<double, double>>& after);

// The sum of bytes_memlock (bpftool) over the maps pinned under pin_root: on
// 6.x kernels a map's real usage, elements included.
double MapMemlockBytes(const std::string& pin_root);

// /proc/meminfo's kernel-side figures, in bytes.
struct KernelMemory {
  double slab = 0, sreclaimable = 0, sunreclaim = 0, percpu = 0;
  double SlabPercpu() const { return slab + percpu; }
  double UnreclaimablePercpu() const { return sunreclaim + percpu; }
};
KernelMemory ReadKernelMemory();

}  // namespace egressd::bench
