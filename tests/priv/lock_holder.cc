// egr-lock-holder: a second (third...) locker of an egressd instance for the
// lock test.  Takes the instance lock, appends "enter NAME T" to the log
// (T: CLOCK_MONOTONIC ns), prints "held", optionally waits for the test to
// open the gate FIFO, optionally unloads or loads the instance while still
// holding the lock, appends "leave NAME T" and exits (which releases it).
//
//   egr-lock-holder NAME PIN_ROOT RUNTIME_DIR LOG [--gate FIFO] [--unload | --load]
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "loader/loader.h"
#include "userspace/common/instance_lock.h"
#include "userspace/common/node.h"

namespace {

void Log(const std::string& log, const char* what, const char* name) {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  char line[128];
  int n = std::snprintf(line, sizeof(line), "%s %s %lld\n", what, name,
                        static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec);
  int fd = open(log.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0 || write(fd, line, n) != n || fsync(fd) != 0) {
    std::perror("lock log");
    _exit(3);
  }
  close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s NAME PIN_ROOT RUNTIME_DIR LOG [--gate FIFO] [--unload | --load]\n", argv[0]);
    return 2;
  }
  const char* name = argv[1];
  egressd::Paths paths;
  paths.pin_root = argv[2];
  paths.runtime_dir = argv[3];
  if (const char* ns = std::getenv("EGRESSD_NODE_NETNS"); ns && *ns) paths.node_netns = ns;
  const std::string log = argv[4];
  std::string gate;
  bool unload = false, load = false;
  for (int i = 5; i < argc; ++i) {
    if (std::strcmp(argv[i], "--gate") == 0 && i + 1 < argc) gate = argv[++i];
    else if (std::strcmp(argv[i], "--unload") == 0) unload = true;
    else if (std::strcmp(argv[i], "--load") == 0) load = true;
  }
  auto lock = egressd::InstanceLock::Acquire(paths);
  if (!lock.ok()) {
    std::fprintf(stderr, "%s\n", lock.status().ToString().c_str());
    return 1;
  }
  Log(log, "enter", name);
  std::printf("held\n");
  std::fflush(stdout);
  if (!gate.empty()) {
    // Blocks until the test opens the FIFO for writing; EOF when it closes it.
    int fd = open(gate.c_str(), O_RDONLY | O_CLOEXEC);
    char buf[16];
    while (fd >= 0 && read(fd, buf, sizeof(buf)) > 0) {
    }
    if (fd >= 0) close(fd);
  }
  int rc = 0;
  if (unload) {
    if (auto s = egressd::UnloadEnforcement(paths, *lock, /*force=*/true); !s.ok()) {
      std::fprintf(stderr, "unload: %s\n", s.ToString().c_str());
      rc = 1;
    }
  }
  if (load) {
    if (auto r = egressd::LoadEnforcement(paths, *lock); !r.ok()) {
      std::fprintf(stderr, "load: %s\n", r.status().ToString().c_str());
      rc = 1;
    }
  }
  Log(log, "leave", name);
  return rc;
}
