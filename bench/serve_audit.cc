#include "serve_audit.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace egressd::bench {
namespace {

constexpr int kPollMs = 50;

// The sample of one record line, if it has one.  The proxy writes the line
// with DnsLine (userspace/audit/dns_events.cc): a string search is enough
// and costs the shared machine far less than a JSON parse per query.
bool ParseSample(std::string_view line, ServeAudit::Sample& s) {
  constexpr std::string_view kLearn = "\"learn_latency_ns\":";
  constexpr std::string_view kTime = "\"time\":\"";
  const size_t l = line.find(kLearn);
  const size_t t = line.rfind(kTime);  // the record's own, at its top level (last)
  if (l == std::string_view::npos || t == std::string_view::npos) return false;
  const char* p = line.data() + l + kLearn.size();
  char* end = nullptr;
  const unsigned long long ns = std::strtoull(p, &end, 10);
  if (end == p) return false;
  const size_t t0 = t + kTime.size();
  const size_t t1 = line.find('"', t0);
  if (t1 == std::string_view::npos) return false;
  absl::Time at;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, std::string(line.substr(t0, t1 - t0)), &at, &err)) return false;
  s.at_ns = absl::ToUnixNanos(at);
  s.learn_us = static_cast<double>(ns) / 1000.0;
  return true;
}

}  // namespace

ServeAudit::ServeAudit(std::string dir) : dir_(std::move(dir)) {
  thread_ = std::thread([this] { Loop(); });
}

ServeAudit::~ServeAudit() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ServeAudit::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    l.unlock();
    Pass();
    l.lock();
    cv_.notify_all();  // new samples for Between()
    cv_.wait_for(l, std::chrono::milliseconds(kPollMs), [&] { return stop_; });
  }
}

void ServeAudit::Pass() {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir_.c_str())) {
    while (const dirent* e = readdir(d)) {
      if (e->d_name[0] != '.' && absl::EndsWith(e->d_name, ".jsonl")) names.push_back(e->d_name);
    }
    closedir(d);
  }
  std::vector<Sample> got;
  uint64_t lines = 0, removed = 0;
  for (const std::string& name : names) {
    const std::string path = absl::StrCat(dir_, "/", name);
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    // Free before the read: the writer has moved on from this file (it
    // releases the old one only once the next holds its lines), so what the
    // read finds is all there will be.
    const bool done = flock(fd, LOCK_EX | LOCK_NB) == 0;
    uint64_t& off = offsets_[name];
    std::string buf;
    char chunk[1 << 16];
    for (;;) {
      const ssize_t n = pread(fd, chunk, sizeof(chunk), static_cast<off_t>(off + buf.size()));
      if (n <= 0) break;
      buf.append(chunk, static_cast<size_t>(n));
    }
    // Whole lines only: the writer appends each with one write().
    size_t start = 0;
    for (size_t nl; (nl = buf.find('\n', start)) != std::string::npos; start = nl + 1) {
      ++lines;
      Sample s;
      if (ParseSample(std::string_view(buf).substr(start, nl - start), s)) got.push_back(s);
    }
    off += start;
    if (done) {
      // Removed before the lock goes: a new writer may take over a gone
      // writer's file with room left (user_events.cc), never this one.
      unlink(path.c_str());
      offsets_.erase(name);
      ++removed;
    }
    close(fd);
  }
  std::lock_guard<std::mutex> l(mu_);
  samples_.insert(samples_.end(), got.begin(), got.end());
  records_ += lines;
  removed_ += removed;
}

std::vector<ServeAudit::Sample> ServeAudit::Between(int64_t from_ns, int64_t to_ns, size_t want, int wait_ms) {
  std::vector<Sample> out;
  auto collect = [&] {
    out.clear();
    for (const Sample& s : samples_) {
      if (s.at_ns >= from_ns && s.at_ns <= to_ns) out.push_back(s);
    }
    return out.size() >= want;
  };
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, std::chrono::milliseconds(wait_ms), collect);
  collect();
  return out;
}

uint64_t ServeAudit::records() const {
  std::lock_guard<std::mutex> l(mu_);
  return records_;
}

uint64_t ServeAudit::files_removed() const {
  std::lock_guard<std::mutex> l(mu_);
  return removed_;
}

}  // namespace egressd::bench
