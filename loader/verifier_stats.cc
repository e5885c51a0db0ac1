#include "loader/verifier_stats.h"

#include <bpf/bpf.h>

#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

namespace egressd {

void LogVerifierCost(bpf_object* obj, double load_seconds) {
  if (!spdlog::should_log(spdlog::level::info)) return;
  long total = 0;
  int programs = 0;
  bpf_program* prog;
  bpf_object__for_each_program(prog, obj) {
    int fd = bpf_program__fd(prog);
    if (fd < 0) continue;  // not loaded (autoload off)
    bpf_prog_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0) {
      spdlog::info("verifier: {}: no program info ({})", bpf_program__name(prog), std::strerror(errno));
      continue;
    }
    ++programs;
    total += info.verified_insns;
    spdlog::info("verifier: {} processed {} instructions", bpf_program__name(prog), info.verified_insns);
  }
  spdlog::info("verifier: {} programs, {} instructions processed, loaded in {:.1f} s", programs, total,
               load_seconds);
}

}  // namespace egressd
