// Held PUTs survive a restart: each is a file <runtime_dir>/held/<id>.json
// holding the request body as it came, written atomically (a temp file,
// fsync, rename, fsync of the directory) when the PUT is held, removed when
// it is applied, replaced or deleted.  At start, before the API serves, each
// is PUT again: a pod whose cgroup appeared while the daemon was down is
// applied then (and a kill -9 between the hold and its answer loses nothing
// the caller was told).  One that no longer applies as input (a config
// changed under it) is dropped, saying why; one the node cannot take now
// (5xx) is kept for the next start.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "userspace/common/atomic_file.h"
#include "userspace/common/errors.h"
#include "userspace/common/unique_fd.h"
#include "userspace/daemon/daemon.h"

namespace egressd::daemon {

namespace {

constexpr char kExt[] = ".json";

}  // namespace

std::string Daemon::HeldDir() const { return options_.paths.runtime_dir + "/held"; }

absl::Status Daemon::PersistHeld(const std::string& id, const std::string& body) {
  EGR_RETURN_IF_ERROR(MakeDirs(HeldDir(), 0700));
  return WriteFileAtomically(absl::StrCat(HeldDir(), "/", id, kExt), body);
}

void Daemon::ForgetHeld(const std::string& id) {
  const std::string path = absl::StrCat(HeldDir(), "/", id, kExt);
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    spdlog::warn("sandbox {}: unlink {}: {} (the next start applies it again)", id, path, std::strerror(errno));
  }
}

void Daemon::ReloadHeld() {
  DIR* d = opendir(HeldDir().c_str());
  if (!d) {
    if (errno != ENOENT) spdlog::error("held PUTs: opendir {}: {}", HeldDir(), std::strerror(errno));
    return;
  }
  std::vector<std::string> ids;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (!absl::EndsWith(name, kExt)) continue;  // temp files of a write that died
    ids.push_back(name.substr(0, name.size() - (sizeof(kExt) - 1)));
  }
  closedir(d);
  for (const std::string& id : ids) {
    const std::string path = absl::StrCat(HeldDir(), "/", id, kExt);
    std::ifstream in(path);
    std::stringstream body;
    body << in.rdbuf();
    if (!in || !CheckSandboxId(id).ok()) {
      spdlog::error("held PUT {}: cannot be read or is not named by a sandbox id: dropped", path);
      unlink(path.c_str());
      continue;
    }
    Response r = Put(id, body.str());
    if (r.status == 202) {
      spdlog::info("sandbox {}: held PUT reloaded, still waiting for its pod's cgroup", id);
    } else if (r.status < 300) {
      spdlog::info("sandbox {}: held PUT reloaded: its cgroup appeared while egressd was down: applied", id);
      ForgetHeld(id);
    } else if (r.status < 500) {
      spdlog::error("sandbox {}: held PUT no longer applies ({}): dropped: {}", id, r.status, r.body.dump());
      ForgetHeld(id);
    } else {
      spdlog::error("sandbox {}: held PUT not applied now ({}), kept for the next start: {}", id, r.status,
                    r.body.dump());
    }
  }
}

}  // namespace egressd::daemon
