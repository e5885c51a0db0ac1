// The audit records of the bench's `egressctl dns serve`, as the bench reads
// them.  No daemon runs in the bench, so nothing holds the audit reader lock:
// the pending files (userspace/audit/user_events.h) would pile up, a writer
// going on in a new file at each 1 MiB and, once they pass 64 MiB (the DNS
// rows' closed-loop runs write ~270 MB of records), writing none at all,
// counting each line as lost.  A tail of the one file of serve's found at
// the start read nothing of it (the DNS speed table's "no samples (10000 /
// 0)" of 2026-12-03).  ServeAudit plays the reader's part for the pending
// directory: a thread reads every pending file as it grows (a writer may go
// on in a gone writer's file, so serve's lines are not only in files named
// after its pid), keeps every answer's `dns.learn_latency_ns` with its
// record's time (the query's arrival), and removes a file once its writer
// has moved on (its flock is free) and it is read to its end, as the holder
// does.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace egressd::bench {

class ServeAudit {
 public:
  // `dir`: <runtime_dir>/audit/pending.
  explicit ServeAudit(std::string dir);
  ~ServeAudit();
  ServeAudit(const ServeAudit&) = delete;
  ServeAudit& operator=(const ServeAudit&) = delete;

  struct Sample {
    int64_t at_ns;    // the record's time (Unix ns): when the query arrived
    double learn_us;  // dns.learn_latency_ns / 1000
  };
  // Every sample read so far whose time is in [from_ns, to_ns], waiting up
  // to `wait_ms` for there to be at least `want` of them (the writer and
  // this reader each lag the answers a little).
  std::vector<Sample> Between(int64_t from_ns, int64_t to_ns, size_t want, int wait_ms);
  uint64_t records() const;        // lines read
  uint64_t files_removed() const;  // files read to their end and removed

 private:
  void Loop();
  void Pass();

  const std::string dir_;
  std::map<std::string, uint64_t> offsets_;  // the reader thread's own
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Sample> samples_;
  uint64_t records_ = 0, removed_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace egressd::bench
