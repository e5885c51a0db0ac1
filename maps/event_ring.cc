#include "maps/event_ring.h"
#include "maps/pinned_maps.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "userspace/common/errors.h"

namespace egressd::maps {

struct EventRing::State {
  std::string pin_root;
  UniqueFd events, fold, loss, ctl, rcusync, stats;
  UniqueFd inner;  // what each grace-period update stores in egr_rcusync_v1
  ring_buffer* rb = nullptr;
  const Handler* handler = nullptr;  // set for the duration of Poll
  int handled = 0;
  absl::Status error;

  ~State() {
    if (rb) ring_buffer__free(rb);
  }
};

namespace {

int OnRecord(void* ctx, void* data, size_t size) {
  auto* st = static_cast<EventRing::State*>(ctx);
  if (size != sizeof(egr_event)) {
    st->error = absl::DataLossError(absl::StrCat(EGR_MAP_EVENTS, ": a record of ", size,
                                                 " bytes, expected ", sizeof(egr_event)));
    return -EINVAL;
  }
  egr_event e;
  __builtin_memcpy(&e, data, sizeof(e));
  (*st->handler)(e);
  ++st->handled;
  return 0;
}

// Every key of a hash map (collected first: deleting while walking restarts
// the walk).
template <typename Key>
absl::StatusOr<std::vector<Key>> Keys(int fd, const char* name) {
  std::vector<Key> keys;
  Key k{}, next{};
  const void* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    keys.push_back(next);
    k = next;
    prev = &k;
  }
  if (errno != ENOENT) return ErrnoStatus(errno, absl::StrCat("walk ", name));
  return keys;
}

}  // namespace

EventRing::EventRing(EventRing&&) noexcept = default;
EventRing& EventRing::operator=(EventRing&&) noexcept = default;
EventRing::~EventRing() = default;

absl::StatusOr<EventRing> EventRing::Open(const std::string& pin_root) {
  EventRing r;
  r.state_ = std::make_unique<State>();
  State& st = *r.state_;
  st.pin_root = pin_root;
  EGR_RETURN_IF_ERROR(OpenPinnedMap(pin_root, EGR_MAP_EVENTS, st.events));
  EGR_RETURN_IF_ERROR(OpenPinnedMap(pin_root, EGR_MAP_FOLD, st.fold));
  EGR_RETURN_IF_ERROR(OpenPinnedMap(pin_root, EGR_MAP_LOSS, st.loss));
  EGR_RETURN_IF_ERROR(OpenPinnedMap(pin_root, EGR_MAP_AUDITCTL, st.ctl));
  EGR_RETURN_IF_ERROR(OpenPinnedMap(pin_root, EGR_MAP_RCUSYNC, st.rcusync));
  EGR_RETURN_IF_ERROR(OpenPinnedMap(pin_root, EGR_MAP_STATS, st.stats));
  int inner = bpf_map_create(BPF_MAP_TYPE_ARRAY, "egr_rcu_inner", 4, 4, 1, nullptr);
  if (inner < 0) return ErrnoStatus(errno, "create the inner map for egr_rcusync_v1");
  st.inner.reset(inner);
  st.rb = ring_buffer__new(st.events.get(), OnRecord, &st, nullptr);
  if (!st.rb) return ErrnoStatus(errno, absl::StrCat("ring_buffer__new on ", EGR_MAP_EVENTS));
  return r;
}

int EventRing::ReadableFd() const { return ring_buffer__epoll_fd(state_->rb); }

absl::StatusOr<int> EventRing::Poll(int timeout_ms, const Handler& handler) {
  State& st = *state_;
  st.handler = &handler;
  st.handled = 0;
  st.error = absl::OkStatus();
  // libbpf 1.1's ring_buffer__poll reads the ring only when epoll_wait
  // reported it, and the programs wake no one below the threshold: what
  // came without a wake-up is taken by the consume (cheap when empty: two
  // positions read).
  int r = ring_buffer__poll(st.rb, timeout_ms);
  if (st.error.ok() && (r >= 0 || r == -EINTR)) {
    const int c = ring_buffer__consume(st.rb);
    if (c < 0) r = c;
  }
  st.handler = nullptr;
  if (!st.error.ok()) return st.error;
  if (r < 0 && r != -EINTR) return LibbpfStatus(r, absl::StrCat("poll ", EGR_MAP_EVENTS));
  return st.handled;
}

absl::StatusOr<WindowCounts> EventRing::CloseWindow() {
  State& st = *state_;
  const __u32 zero = 0;
  egr_auditctl_val ctl{};
  if (bpf_map_lookup_elem(st.ctl.get(), &zero, &ctl) != 0)
    return ErrnoStatus(errno, absl::StrCat("read ", EGR_MAP_AUDITCTL));
  WindowCounts out;
  out.epoch = ctl.epoch;
  ctl.epoch += 1;
  if (bpf_map_update_elem(st.ctl.get(), &zero, &ctl, BPF_ANY) != 0)
    return ErrnoStatus(errno, absl::StrCat("update ", EGR_MAP_AUDITCTL));
  // The kernel waits for an RCU grace period on every update of a map of
  // maps: afterwards no program that read the old epoch is still running.
  const int inner = st.inner.get();
  if (bpf_map_update_elem(st.rcusync.get(), &zero, &inner, BPF_ANY) != 0)
    return ErrnoStatus(errno, absl::StrCat("update ", EGR_MAP_RCUSYNC, " (RCU grace period)"));

  // Every epoch but the new one is closed (an older one is what a reader
  // that died before draining left behind).
  EGR_ASSIGN_OR_RETURN(auto fold_keys, Keys<egr_event_key>(st.fold.get(), EGR_MAP_FOLD));
  for (const egr_event_key& k : fold_keys) {
    if (k.epoch == ctl.epoch) continue;
    egr_fold_val v{};
    if (bpf_map_lookup_and_delete_elem(st.fold.get(), &k, &v) != 0) {
      if (errno == ENOENT) continue;
      return ErrnoStatus(errno, absl::StrCat("take ", EGR_MAP_FOLD, " entry"));
    }
    if (v.count > 0) out.folds.emplace_back(k, v);
  }
  EGR_ASSIGN_OR_RETURN(auto loss_keys, Keys<egr_loss_key>(st.loss.get(), EGR_MAP_LOSS));
  for (const egr_loss_key& k : loss_keys) {
    if (k.epoch == ctl.epoch) continue;
    egr_loss_val v{};
    if (bpf_map_lookup_and_delete_elem(st.loss.get(), &k, &v) != 0) {
      if (errno == ENOENT) continue;
      return ErrnoStatus(errno, absl::StrCat("take ", EGR_MAP_LOSS, " entry"));
    }
    out.loss_keys.push_back(k);
    out.lost.push_back(v.lost);
  }
  return out;
}

absl::StatusOr<uint64_t> EventRing::Counter(egr_stat stat) const {
  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return LibbpfStatus(ncpu, "count possible CPUs");
  std::vector<uint64_t> per_cpu(ncpu);
  const __u32 key = stat;
  if (bpf_map_lookup_elem(state_->stats.get(), &key, per_cpu.data()) != 0)
    return ErrnoStatus(errno, absl::StrCat("read ", EGR_MAP_STATS));
  uint64_t sum = 0;
  for (uint64_t v : per_cpu) sum += v;
  return sum;
}

}  // namespace egressd::maps
