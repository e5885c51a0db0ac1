#include "dns_speed.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"

namespace egressd::bench {
namespace {

struct SpeedPlan {
  int rounds;                  // latency rounds per (name, rate)
  double seconds;              // one latency run
  std::vector<int> rates;      // the latency rows' fixed rates
  int search_rounds;           // step searches per enforcer and name
  double step_seconds;         // one step of the search
  std::vector<int> ladder;     // the rates tried until one fails
  int bisections;              // between the last pass and the first failure
};

// The rcode every answer of a row must have under enforcer idx (the floor's
// resolver knows the denied name too).
const char* Expected(bool allowed, int idx) { return allowed || idx == 0 ? "NOERROR" : "NXDOMAIN"; }

// One egr-dns-load run from enforcer idx's pod (its netns and cgroup).
struct LoadRun {
  bool ran = false;
  double sent = 0, lost = 0, late = 0, offered = 0, p50 = 0, p99 = 0, p999 = 0;
  std::map<std::string, int> rcodes;
  std::string error;
};

LoadRun Load(const DnsLab& d, int idx, const std::string& name, int rate, double seconds) {
  std::vector<std::string> argv = {lab::BinaryPath("egr-dns-load"), "--server", d.resolver(), "--name", name,
                                   "--rate", std::to_string(rate), "--seconds", absl::StrCat(seconds)};
  // EGR_BENCH_DNSSPEED_SAMPLES_DIR: every run's per-query samples
  // (egr-dns-load --samples) as <n>-<enforcer>-<name>-<rate>.txt there.
  static int runs = 0;
  if (const char* dir = getenv("EGR_BENCH_DNSSPEED_SAMPLES_DIR")) {
    argv.insert(argv.end(), {"--samples", absl::StrCat(dir, "/", runs++, "-", kEnforcers[idx], "-", name, "-", rate, ".txt")});
  }
  lab::RunResult r = lab::Run({.argv = argv,
                               .netns = d.netns(idx), .cgroup = d.cgroup(idx), .hostile = false,
                               .timeout = std::chrono::milliseconds(static_cast<int>(seconds * 1000) + 30000),
                               .env = {}, .stdin_data = ""});
  LoadRun l;
  json j = json::parse(r.out, nullptr, false);
  if (r.exit_code != 0 || j.is_discarded() || !j.is_object()) {
    l.error = "egr-dns-load: " + r.Describe();
    return l;
  }
  l.sent = j["sent"];
  l.lost = j["lost"];
  l.late = j["late_sends"];
  l.offered = j["offered_qps"];
  l.p50 = j["p50_us"];
  l.p99 = j["p99_us"];
  l.p999 = j["p999_us"];
  for (const auto& [k, v] : j["rcodes"].items()) l.rcodes[k] = v.get<int>();
  l.ran = l.sent > 0;
  return l;
}

int64_t NowUnixNs() { return absl::ToUnixNanos(absl::Now()); }

// Context switches of every thread of `pid` so far (voluntary: it slept;
// involuntary: it was preempted), from /proc/PID/task/*/status.
std::pair<double, double> ContextSwitches(pid_t pid) {
  double vol = 0, invol = 0;
  std::error_code ec;
  for (const auto& t : std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/task"), ec)) {
    for (absl::string_view line : absl::StrSplit(Slurp(t.path().string() + "/status"), '\n')) {
      double v = 0;
      if (absl::ConsumePrefix(&line, "voluntary_ctxt_switches:") &&
          absl::SimpleAtod(absl::StripAsciiWhitespace(line), &v)) vol += v;
      if (absl::ConsumePrefix(&line, "nonvoluntary_ctxt_switches:") &&
          absl::SimpleAtod(absl::StripAsciiWhitespace(line), &v)) invol += v;
    }
  }
  return {vol, invol};
}

json Percentiles(const std::vector<double>& v) {
  if (v.empty()) return {{"n", 0}};
  return {{"n", v.size()}, {"p50", Quantile(v, 0.5)}, {"p99", Quantile(v, 0.99)},
          {"max", *std::max_element(v.begin(), v.end())}};
}

// The latency rows of one name at one rate: p50/p99 of every answer of each
// run, the round's difference to (added) and ratio of the floor's; for the
// allowed name, every answer's answer-to-map time from both enforcers.
json LatencyRow(DnsLab& d, bool allowed, int rate, const SpeedPlan& p, const std::string& qname, bool& all_ran) {
  json row;
  std::vector<double> map_us[3];
  std::map<std::string, double> lost, sent, late;
  // Open loop: egr-dns-load sends on its schedule, never waiting on an answer.
  // egressd's proxy per answered query: CPU (all its threads) and context
  // switches, each run's own.
  std::vector<double> serve_cpu_us, serve_vol, serve_invol;
  Interleaved lat = Interleave(p.rounds, [&](int idx) {
    const double c0 = idx == 2 ? ProcessCpuSeconds(d.serve_pid()) : 0;
    const auto s0 = idx == 2 ? ContextSwitches(d.serve_pid()) : std::pair<double, double>{};
    const int64_t t0 = NowUnixNs();
    LoadRun r = Load(d, idx, qname, rate, p.seconds);
    const int64_t t1 = NowUnixNs();
    if (idx == 2 && r.sent > r.lost) {
      const auto s1 = ContextSwitches(d.serve_pid());
      const double n = r.sent - r.lost;
      serve_cpu_us.push_back((ProcessCpuSeconds(d.serve_pid()) - c0) * 1e6 / n);
      serve_vol.push_back((s1.first - s0.first) / n);
      serve_invol.push_back((s1.second - s0.second) / n);
    }
    lost[kEnforcers[idx]] += r.lost;
    sent[kEnforcers[idx]] += r.sent;
    late[kEnforcers[idx]] += r.late;
    if (allowed && idx == 1) {
      auto s = d.ForwarderAnswerToSetUs();
      if (s.ok()) {
        map_us[1].insert(map_us[1].end(), s->begin(), s->end());
      } else {
        std::fprintf(stderr, "dns speed: %s\n", s.status().ToString().c_str());
      }
    }
    if (allowed && idx == 2) {
      // Every answer of the run learned its address: its record carries
      // learn_latency_ns (stamped with its query's arrival, inside the
      // run's window).  The proxy's audit writer and the bench's reader
      // each lag a little: waited for, up to a few seconds.
      const auto want = static_cast<size_t>(std::max(0.0, r.sent - r.lost));
      const auto got = d.serve_audit().Between(t0, t1, want, 5000);
      for (const auto& s : got) map_us[2].push_back(s.learn_us);
      if (got.size() < want) {
        std::fprintf(stderr, "dns speed: %zu of %zu answers' audit records with learn_latency_ns (%d/s)\n",
                     got.size(), want, rate);
      }
    }
    // Loss is a figure (row["lost"]), not a failure: the run counts as run
    // when every answer had the rcode its enforcer must give.
    const bool ok = r.ran && (r.rcodes.empty() || (r.rcodes.size() == 1 && r.rcodes.count(Expected(allowed, idx))));
    if (!ok || r.lost >= 0.01 * r.sent) {
      std::fprintf(stderr, "dns speed latency (%s at %d/s, %s): lost %.0f of %.0f, rcodes %s %s\n",
                   allowed ? "allowed" : "denied", rate, kEnforcers[idx], r.lost, r.sent, json(r.rcodes).dump().c_str(),
                   r.error.c_str());
    }
    return Measured{r.p50, r.p99, ok};
  });
  Store(lat, row, "p50_us", "p99_us");
  for (const char* en : {"nftables", "egressd"}) {
    std::vector<double> d50, d99;
    for (size_t i = 0; i < lat.value.at(en).size(); ++i) {
      d50.push_back(lat.value.at(en)[i] - lat.value.at("none")[i]);
      d99.push_back(lat.cpu.at(en)[i] - lat.cpu.at("none")[i]);
    }
    row["added_p50_us"][en] = Summary(d50);
    row["added_p99_us"][en] = Summary(d99);
  }
  for (const char* en : kEnforcers) row["lost"][en] = {{"lost", lost[en]}, {"sent", sent[en]}, {"late_sends", late[en]}};
  if (!serve_cpu_us.empty()) {
    row["egressd_serve_per_query"] = {{"cpu_us", Summary(serve_cpu_us)},
                                      {"voluntary_switches", Summary(serve_vol)},
                                      {"involuntary_switches", Summary(serve_invol)}};
  }
  if (allowed) {
    row["answer_to_map_us"]["nftables"] = Percentiles(map_us[1]);
    row["answer_to_map_us"]["egressd"] = Percentiles(map_us[2]);
  }
  all_ran = all_ran && lat.all_ok;
  return row;
}

// The highest open-loop rate enforcer idx sustains with under 1% lost and at
// least 95% of the rate sent and answered: up the ladder until a step fails
// (each step gets a second try: one bad moment of a shared machine is not
// the path's capacity), then bisect between the last pass and the failure.
// A step whose generator did not run (it refused its flags, its socket
// failed) is no failure of the path: the search stops there with the error,
// and the run is not complete.
json MaxRate(DnsLab& d, int idx, const std::string& qname, const SpeedPlan& p, bool& all_ran) {
  json steps = json::array();
  std::string error;
  auto pass = [&](int rate) {
    for (int attempt = 0; attempt < 2 && error.empty(); ++attempt) {
      LoadRun r = Load(d, idx, qname, rate, p.step_seconds);
      if (!r.error.empty()) {
        error = absl::StrCat("at ", rate, " q/s: ", r.error);
        steps.push_back({{"rate", rate}, {"error", r.error}});
        break;
      }
      const bool ok = r.ran && r.lost < 0.01 * r.sent && r.offered >= 0.95 * rate;
      steps.push_back({{"rate", rate}, {"sent", r.sent}, {"lost", r.lost}, {"offered_qps", r.offered}, {"pass", ok}});
      if (ok) return true;
    }
    return false;
  };
  int lo = 0, hi = 0;
  for (int rate : p.ladder) {
    if (!pass(rate)) {
      hi = rate;
      break;
    }
    lo = rate;
  }
  for (int i = 0; hi > 0 && error.empty() && i < p.bisections; ++i) {
    const int mid = (lo + hi) / 2;
    (pass(mid) ? lo : hi) = mid;
  }
  if (!error.empty()) {
    all_ran = false;
    return {{"qps", 0}, {"error", error}, {"steps", steps}};
  }
  return {{"qps", lo}, {"capped", hi == 0}, {"steps", steps}};
}

}  // namespace

json DnsSpeed(DnsLab& d, bool quick, bool& all_ran) {
  SpeedPlan p = quick ? SpeedPlan{1, 0.3, {1000, 5000}, 1, 0.3, {2000, 4000}, 0}
                      : SpeedPlan{5, 2.0, {1000, 5000}, 2, 2.0, {}, 3};
  if (!quick) {
    // To 158,700: the floor and egressd's denied rows pass 80,900 (19:00).
    for (double r = 2000; r <= 160000; r *= 1.4) p.ladder.push_back(static_cast<int>(r / 100) * 100);
  }
  // For iterating on the proxy (bench/results/2026-12-03-dns-notes.md):
  // EGR_BENCH_DNSSPEED_ROUNDS / _SECONDS set the latency rows' rounds and
  // run length, _RATES their rates (comma-separated), _NO_SEARCH=1 skips the
  // rate search, _ALLOWED_ONLY=1 the denied rows, _DENIED_ONLY=1 the allowed
  // ones (for a stand-in that answers NXDOMAIN to everything:
  // bench/profile/nx_reflect_serve.sh).
  if (const char* v = getenv("EGR_BENCH_DNSSPEED_ROUNDS")) p.rounds = std::max(1, atoi(v));
  if (const char* v = getenv("EGR_BENCH_DNSSPEED_SECONDS")) p.seconds = std::max(0.1, atof(v));
  if (const char* v = getenv("EGR_BENCH_DNSSPEED_RATES")) {
    p.rates.clear();
    for (absl::string_view r : absl::StrSplit(v, ',', absl::SkipEmpty())) p.rates.push_back(atoi(std::string(r).c_str()));
  }
  if (const char* v = getenv("EGR_BENCH_DNSSPEED_NO_SEARCH"); v && std::string(v) == "1") p.search_rounds = 0;
  const char* allowed_only = getenv("EGR_BENCH_DNSSPEED_ALLOWED_ONLY");
  const char* denied_only = getenv("EGR_BENCH_DNSSPEED_DENIED_ONLY");
  (void)d.ForwarderAnswerToSetUs();  // the rows before these
  json out;
  out["rates"] = p.rates;
  out["seconds"] = p.seconds;
  out["rounds"] = p.rounds;
  out["step_seconds"] = p.step_seconds;
  out["ladder"] = p.ladder;
  out["bisections"] = p.bisections;
  for (bool allowed : {true, false}) {
    if (!allowed && allowed_only && std::string(allowed_only) == "1") break;
    if (allowed && denied_only && std::string(denied_only) == "1") continue;
    const char* name = allowed ? "allowed" : "denied";
    const std::string data = allowed ? kAllowedName : kDeniedName;
    for (int rate : p.rates) out[name]["latency"][std::to_string(rate)] = LatencyRow(d, allowed, rate, p, data, all_ran);
    // The search: rounds of the three enforcers, the order rotated.
    std::map<std::string, std::vector<double>> best;
    json runs = json::array();
    for (int round = 0; round < p.search_rounds; ++round) {
      for (int k = 0; k < 3; ++k) {
        const int idx = (k + round) % 3;
        json m = MaxRate(d, idx, data, p, all_ran);
        best[kEnforcers[idx]].push_back(m["qps"].get<double>());
        m["enforcer"] = kEnforcers[idx];
        runs.push_back(std::move(m));
      }
    }
    if (p.search_rounds == 0) continue;
    for (const char* en : kEnforcers) out[name]["max_qps"][en] = Summary(best[en]);
    out[name]["max_qps_runs"] = runs;
  }
  out["serve_audit"] = {{"records_read", d.serve_audit().records()}, {"files_removed", d.serve_audit().files_removed()}};
  return out;
}

}  // namespace egressd::bench
