/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* The audit trail's kernel half: after a decision, its wrapper hands it here
 * and one struct egr_event goes on the ring, or the occurrence is folded into
 * a count, or (ring and fold map full) counted as lost.  Which one is decided
 * before any ring reservation, by the sandbox's own budget, so a flooding
 * sandbox folds instead of filling the ring and never takes another sandbox's
 * room.  Nothing is dropped uncounted: submitted + folded + lost is every
 * occurrence (maps/egressd_abi.h says how the reader drains the counts). */
#ifndef EGRESSD_BPF_LIB_AUDIT_H
#define EGRESSD_BPF_LIB_AUDIT_H

#include "lib/maps.h"
#include "lib/addr.h"
#include "lib/decision.h"
#include "lib/sock_addr.h"

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, EGR_EVENT_RING_BYTES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_events_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_FOLDS);
	__type(key, struct egr_event_key);
	__type(value, struct egr_fold_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_fold_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_LOSS);
	__type(key, struct egr_loss_key);
	__type(value, struct egr_loss_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_loss_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_CGROUPS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, struct egr_budget_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_budget_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct egr_auditctl_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_auditctl_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_auditseq_v1 SEC(".maps");

/* Never read by a program: the reader updates it only for the RCU grace
 * period a map-of-maps update waits for (see the ABI header). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__array(values, struct {
		__uint(type, BPF_MAP_TYPE_ARRAY);
		__uint(max_entries, 1);
		__type(key, __u32);
		__type(value, __u32);
	});
} egr_rcusync_v1 SEC(".maps");

#define EGR_AF_INET 2
#define EGR_AF_INET6 10
#define EGR_AUDIT_COST_NS (1000000000ull / EGR_AUDIT_RATE_PER_S)
#define EGR_AUDIT_BURST_NS (EGR_AUDIT_COST_NS * EGR_AUDIT_BURST)

static __always_inline __u32 egr_audit_epoch(void)
{
	__u32 zero = 0;
	struct egr_auditctl_val *c = bpf_map_lookup_elem(&egr_auditctl_v1, &zero);

	return c ? c->epoch : 0;
}

/* One occurrence's room on the ring, if the sandbox has budget left.  The
 * update races between CPUs (a few extra records in a burst), never the
 * counts. */
static __always_inline int egr_audit_budget_take(__u64 sandbox_id, __u64 now)
{
	struct egr_budget_val *b = bpf_map_lookup_elem(&egr_budget_v1, &sandbox_id);
	__u64 tat;

	if (!b) {
		struct egr_budget_val first = { .tat_boot_ns = now + EGR_AUDIT_COST_NS };

		return bpf_map_update_elem(&egr_budget_v1, &sandbox_id, &first, BPF_NOEXIST) == 0;
	}
	tat = b->tat_boot_ns;
	if (tat < now)
		tat = now;
	if (tat - now > EGR_AUDIT_BURST_NS)
		return 0;
	b->tat_boot_ns = tat + EGR_AUDIT_COST_NS;
	return 1;
}

/* What matched, as the record names it (enum egr_match_flags). */
struct egr_match {
	__u32 id;
	__u8 plen;
	__u8 flags;
};

static __always_inline void egr_audit_lose(const struct egr_event_key *k)
{
	struct egr_loss_key lk = { .sandbox_id = k->sandbox_id, .epoch = k->epoch };
	struct egr_loss_val one = { .lost = 1 };
	struct egr_loss_val *v;

	egr_count(EGR_STAT_EVENT_LOST);
	v = bpf_map_lookup_elem(&egr_loss_v1, &lk);
	if (!v) {
		if (bpf_map_update_elem(&egr_loss_v1, &lk, &one, BPF_NOEXIST) == 0)
			return;
		v = bpf_map_lookup_elem(&egr_loss_v1, &lk);
	}
	if (v)
		__sync_fetch_and_add(&v->lost, 1);
	/* else only the node-wide counter has it: the reader reports the
	 * difference as a loss no sandbox is named for. */
}

/* 0: the occurrence was lost (the fold map is full). */
static __always_inline int egr_audit_fold(const struct egr_event_key *k,
					  const struct egr_event_task *t, __u16 flags,
					  const struct egr_match *m, __u64 now)
{
	struct egr_fold_val *v = bpf_map_lookup_elem(&egr_fold_v1, k);

	if (!v) {
		struct egr_fold_val first = {
			.task = *t,
			.first_boot_ns = now,
			.count = 1,
			.flags = flags,
			.match_plen = m->plen,
			.match_flags = m->flags,
			.match_id = m->id,
		};

		if (bpf_map_update_elem(&egr_fold_v1, k, &first, BPF_NOEXIST) == 0) {
			egr_count(EGR_STAT_EVENT_FOLDED);
			return 1;
		}
		v = bpf_map_lookup_elem(&egr_fold_v1, k); /* another CPU was first */
		if (!v) {
			egr_audit_lose(k);
			return 0;
		}
	}
	__sync_fetch_and_add(&v->count, 1);
	egr_count(EGR_STAT_EVENT_FOLDED);
	return 1;
}

/* Not inlined so that struct egr_event is in the object's BTF (a type only
 * local variables use is not), where tests/unit/abi_btf_test.cc checks it.
 * Ring memory is not zeroed: every byte is written. */
static __noinline void egr_audit_fill(struct egr_event *e, const struct egr_event_key *k,
				      const struct egr_event_task *t, __u64 now)
{
	__u32 zero = 0;
	__u64 *seq;

	e->key = *k;
	e->task = *t;
	e->boot_ns = now;
	e->cpu = bpf_get_smp_processor_id();
	e->pad1 = 0;
	seq = bpf_map_lookup_elem(&egr_auditseq_v1, &zero);
	e->seq = seq ? ++*seq : 0;
}

/* Records are submitted without waking the reader while the ring holds less
 * than this unread: a wake-up is an irq_work and a cross-CPU wake from inside
 * the program, 7-9 us of connect4 on this project's machines
 * (bench/results/2026-12-03-ring-notes.md).  The default flag (0) wakes the
 * reader for every record that finds it caught up, which for a prompt reader
 * is every record.  The reader drains on its own clock instead, at least
 * every maps::kRingDrainMs (maps/event_ring.h).
 *
 * Past the threshold a record forces a wake-up (the default would not, the
 * reader being behind) each time the unread data crosses a multiple of
 * EGR_EVENT_RING_WAKE_STEP: a flood never fills the ring for want of a
 * wake-up, and where no reader runs at all the irq_work (~8 us even with
 * nobody to wake) is paid ~100 times on the way to a full ring, not by every
 * record.  A waiting reader needs one: woken, it takes all the ring holds.
 * The step is judged from the unread size when the record is submitted,
 * which other CPUs' reservations may have moved: a step can be missed (the
 * next one, or the reader's clock, catches it) or taken twice, never
 * anything lost; loss is still only a full ring, counted as before. */
#define EGR_EVENT_RING_WAKE_BYTES (EGR_EVENT_RING_BYTES / 4)
#define EGR_EVENT_RING_WAKE_STEP (64u << 10)
/* One record's room on the ring: its 8-byte header and body, 8-aligned. */
#define EGR_EVENT_RING_RECORD_BYTES ((sizeof(struct egr_event) + 8 + 7) & ~7ull)

static __always_inline __u64 egr_audit_wake_flags(void)
{
	__u64 unread = bpf_ringbuf_query(&egr_events_v1, BPF_RB_AVAIL_DATA);

	if (unread < EGR_EVENT_RING_WAKE_BYTES)
		return BPF_RB_NO_WAKEUP;
	if ((unread - EGR_EVENT_RING_RECORD_BYTES) / EGR_EVENT_RING_WAKE_STEP !=
	    unread / EGR_EVENT_RING_WAKE_STEP)
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}

/* 0: the occurrence was lost (the ring is full). */
static __always_inline int egr_audit_emit(const struct egr_event_key *k,
					  const struct egr_event_task *t, __u16 flags,
					  const struct egr_match *m, __u64 now)
{
	struct egr_event *e = bpf_ringbuf_reserve(&egr_events_v1, sizeof(*e), 0);

	if (!e) {
		egr_audit_lose(k);
		return 0;
	}
	e->flags = flags;
	e->match_plen = m->plen;
	e->match_flags = m->flags;
	e->match_id = m->id;
	egr_audit_fill(e, k, t, now);
	bpf_ringbuf_submit(e, egr_audit_wake_flags());
	egr_count(EGR_STAT_EVENT_SUBMITTED);
	return 1;
}

/* Connects and backstop drops are recorded one by one within the budget; a
 * send is recorded once per socket and destination each window, its repeats
 * folded.  Beyond the budget the socket is left out of the key, so a flood
 * from many sockets folds into one count per destination. */
/* 1: the occurrence is on the record (a ring record, or a count that will
 * be one); 0: it was lost (counted in egr_loss_v1). */
static __always_inline int egr_audit_record(struct egr_event_key *k,
					    const struct egr_event_task *t, __u16 flags,
					    const struct egr_match *m)
{
	__u64 now = bpf_ktime_get_boot_ns();

	if (k->kind == EGR_EVENT_SEND) {
		struct egr_fold_val *seen = bpf_map_lookup_elem(&egr_fold_v1, k);

		if (seen) {
			__sync_fetch_and_add(&seen->count, 1);
			egr_count(EGR_STAT_EVENT_FOLDED);
			return 1;
		}
		if (egr_audit_budget_take(k->sandbox_id, now)) {
			struct egr_fold_val mark = { .task = *t, .first_boot_ns = now,
						     .flags = flags, .match_plen = m->plen,
						     .match_flags = m->flags, .match_id = m->id };

			int recorded = egr_audit_emit(k, t, flags, m, now);

			/* count 0: the repeats fold here (and are on the record
			 * as its count even when this one was lost); a full map
			 * only means they are recorded again while budget lasts */
			bpf_map_update_elem(&egr_fold_v1, k, &mark, BPF_NOEXIST);
			return recorded;
		}
		k->sock_cookie = 0;
		return egr_audit_fold(k, t, flags, m, now);
	}
	if (egr_audit_budget_take(k->sandbox_id, now))
		return egr_audit_emit(k, t, flags, m, now);
	return egr_audit_fold(k, t, flags, m, now);
}

/* What egressd did not judge is not recorded (decision.h counts the same). */
static __always_inline int egr_audit_judged(const struct egr_cgroup_val *sb,
					    struct egr_decision d)
{
	return sb && d.reason != EGR_REASON_NOT_SANDBOX && d.reason != EGR_REASON_NOT_IP;
}

static __always_inline int egr_audit_plen(__u32 lpm_flags, struct egr_match *m)
{
	if (!(lpm_flags & EGR_LPM_PLEN_SET))
		return 0; /* written by an older control plane */
	m->plen = lpm_flags & EGR_LPM_PLEN_MASK;
	m->flags |= EGR_MATCH_CIDR;
	return 1;
}

static __always_inline void egr_audit_key4(struct egr_lpm4_key *k, __u32 policy_id, __u32 ip4_be)
{
	k->prefixlen = 64;
	k->policy_id = bpf_htonl(policy_id);
	__builtin_memcpy(k->addr, &ip4_be, 4);
}

/* The CIDR the judge matched, looked up again in the judge's order
 * (lib/verdict.h): an LPM lookup returns the entry's value, which holds its
 * own prefix length, never the key. */
static __always_inline void egr_audit_match_cidr(__u32 policy_id, int protected,
						 const struct egr_addr *a, struct egr_match *m)
{
	const struct egr_allow_val *av;
	const struct egr_prot_val *pv;
	struct egr_lpm4_key k4;
	struct egr_lpm6_key k6 = { .prefixlen = 160, .policy_id = bpf_htonl(policy_id) };

	if (egr_addr_is_v4(a)) {
		egr_audit_key4(&k4, policy_id, a->w[3]);
		if (protected) {
			pv = bpf_map_lookup_elem(&egr_prot4_v1, &k4);
			if (pv)
				egr_audit_plen(pv->flags, m);
		} else {
			av = bpf_map_lookup_elem(&egr_allow4_v1, &k4);
			if (av)
				egr_audit_plen(av->flags, m);
		}
		return;
	}
	__builtin_memcpy(k6.addr, a->b, 16);
	if (!protected) {
		av = bpf_map_lookup_elem(&egr_allow6_v1, &k6);
		if (av)
			egr_audit_plen(av->flags, m);
		return;
	}
	__u32 v4[EGR_MAX_EMBEDDED_V4];
	int n = egr_addr_embedded_v4(a, v4);

	for (int i = 0; i < EGR_MAX_EMBEDDED_V4; i++) {
		if (i >= n)
			break;
		egr_audit_key4(&k4, policy_id, v4[i]);
		pv = bpf_map_lookup_elem(&egr_prot4_v1, &k4);
		if (pv) {
			if (egr_audit_plen(pv->flags, m)) {
				m->flags |= EGR_MATCH_CIDR_EMBEDDED_V4;
				m->id = v4[i];
			}
			return;
		}
	}
	pv = bpf_map_lookup_elem(&egr_prot6_v1, &k6);
	if (pv)
		egr_audit_plen(pv->flags, m);
}

/* What put the destination under its reason: the CIDR (allowed, protected)
 * or the name id the DNS proxy wrote with a resolved address. */
static __always_inline void egr_audit_match(__u64 sandbox_id, __u32 policy_id, __u8 reason,
					    const struct egr_addr *a, struct egr_match *m)
{
	if (reason == EGR_REASON_RESOLVED) {
		struct egr_resolved_key rk = { .sandbox_id = sandbox_id };
		struct egr_resolved_val *rv;

		__builtin_memcpy(rk.addr, a->b, 16);
		rv = bpf_map_lookup_elem(&egr_resolved_v2, &rk);
		if (rv)
			m->id = rv->name_ids[0];
	} else if (reason == EGR_REASON_PROTECTED || reason == EGR_REASON_ALLOWED) {
		egr_audit_match_cidr(policy_id, reason == EGR_REASON_PROTECTED, a, m);
	}
}

/* A redirected query is recorded as the sandbox asked it: to its resolver
 * (the socket's dns_orig), not to the endpoint the redirect put in ctx. */
static __always_inline void egr_audit_dns_asked(struct bpf_sock_addr *ctx, struct egr_addr *dst,
						__u16 *port_be)
{
	struct egr_sock_val *st;

	if (!ctx->sk)
		return;
	st = bpf_sk_storage_get(&egr_sock_v2, ctx->sk, 0, 0);
	if (!st || !(st->flags & EGR_SOCK_DNS_REDIRECTED))
		return;
	__builtin_memcpy(dst->b, st->dns_orig, 16);
	*port_be = st->dns_orig_port;
}

/* connect4/6 and sendmsg4/6, in the caller's context.  0: the occurrence
 * was lost (a strict sandbox refuses it, lib/audit_mode.h). */
static __always_inline int egr_audit_sock_addr(struct bpf_sock_addr *ctx,
					       const struct egr_cgroup_val *sb,
					       struct egr_decision d, int is_v4, int is_connect)
{
	struct egr_event_key k = {};
	struct egr_event_task t = {};
	struct egr_match m = {};
	struct egr_addr dst;
	__u16 port_be;
	__u64 v;

	if (!egr_audit_judged(sb, d))
		return 1;
	if (d.action == EGR_PASS_WOULD_DENY)
		egr_count(EGR_STAT_WOULD_DENY);
	egr_sock_addr_dst(ctx, is_v4, &dst);
	port_be = (__u16)ctx->user_port;
	if (d.reason == EGR_REASON_DNS_REDIRECT)
		egr_audit_dns_asked(ctx, &dst, &port_be);
	else
		egr_audit_match(sb->sandbox_id, sb->policy_id, d.reason, &dst, &m);
	k.sandbox_id = sb->sandbox_id;
	k.sock_cookie = is_connect ? 0 : bpf_get_socket_cookie(ctx);
	__builtin_memcpy(k.daddr, dst.b, 16);
	k.dport = bpf_ntohs(port_be);
	k.kind = is_connect ? EGR_EVENT_CONNECT : EGR_EVENT_SEND;
	k.action = d.action;
	k.reason = d.reason;
	k.family = is_v4 ? EGR_AF_INET : EGR_AF_INET6;
	k.protocol = ctx->protocol;
	k.epoch = egr_audit_epoch();

	t.cgroup_id = bpf_get_current_cgroup_id();
	v = bpf_get_current_pid_tgid();
	t.tgid = v >> 32;
	t.pid = (__u32)v;
	v = bpf_get_current_uid_gid();
	t.uid = (__u32)v;
	t.gid = v >> 32;
	bpf_get_current_comm(t.comm, sizeof(t.comm));

	return egr_audit_record(&k, &t, EGR_EVENT_HAS_TASK | EGR_EVENT_HAS_UID, &m);
}

/* The destination of a dropped packet, from its fixed header only (the judge
 * walked the extension headers; a record needs the address, the protocol the
 * header names and the port when it is right behind). */
static __always_inline void egr_audit_skb_dst(struct __sk_buff *skb, __u32 l3_off,
					      struct egr_event_key *k)
{
	__u8 hdr[40];
	__u32 l4 = 0;
	__u16 port;

	if (skb->protocol == bpf_htons(EGR_ETH_P_IP)) {
		if (bpf_skb_load_bytes(skb, l3_off, hdr, 20))
			return;
		k->family = EGR_AF_INET;
		k->protocol = hdr[9];
		k->daddr[10] = 0xff;
		k->daddr[11] = 0xff;
		__builtin_memcpy(&k->daddr[12], &hdr[16], 4);
		/* a non-first fragment has no ports */
		if (!(((hdr[6] & 0x1f) << 8) | hdr[7]))
			l4 = (hdr[0] & 0x0f) * 4;
	} else if (skb->protocol == bpf_htons(EGR_ETH_P_IPV6)) {
		if (bpf_skb_load_bytes(skb, l3_off, hdr, 40))
			return;
		k->family = EGR_AF_INET6;
		k->protocol = hdr[6];
		__builtin_memcpy(k->daddr, &hdr[24], 16);
		l4 = 40;
	}
	if (l4 && egr_l4_has_ports(k->protocol) &&
	    !bpf_skb_load_bytes(skb, l3_off + l4 + 2, &port, 2))
		k->dport = bpf_ntohs(port);
}

/* cgroup_skb egress: only drops (and an audit-only sandbox's would-denies)
 * are recorded (what passes was recorded at connect() or sendmsg()).  It may run in softirq, where "current" is not
 * the sender: no task, and the uid is the socket's.
 *
 * A global function, verified once whatever the decision (inlined, the
 * backstop went from 227k to 619k verified instructions on 6.18).  Global
 * functions take the context and scalars only: the decision comes packed,
 * action << 8 | reason. */
__noinline int egr_audit_skb_record(struct __sk_buff *skb, __u64 sandbox_id, __u32 decision)
{
	struct egr_event_key k = {};
	struct egr_event_task t = {};
	struct egr_match m = {};
	__u32 action = (decision >> 8) & 0xff, reason = decision & 0xff;
	__u16 flags = 0;

	if (!skb || action == EGR_PASS || reason == EGR_REASON_NOT_SANDBOX ||
	    reason == EGR_REASON_NOT_IP)
		return 0;
	if (action == EGR_PASS_WOULD_DENY)
		egr_count(EGR_STAT_WOULD_DENY);
	k.sandbox_id = sandbox_id;
	k.kind = EGR_EVENT_BACKSTOP;
	k.action = action;
	k.reason = reason;
	k.epoch = egr_audit_epoch();
	egr_audit_skb_dst(skb, 0, &k);
	if (k.family && reason == EGR_REASON_PROTECTED) {
		/* The sandbox id is its cgroup's id, the key of its entry. */
		const struct egr_cgroup_val *sb = bpf_map_lookup_elem(&egr_cgroups_v1, &sandbox_id);
		struct egr_addr dst;

		__builtin_memcpy(dst.b, k.daddr, 16);
		if (sb)
			egr_audit_match_cidr(sb->policy_id, 1, &dst, &m);
	}
	t.cgroup_id = bpf_skb_cgroup_id(skb);
	if (skb->sk) {
		t.uid = bpf_get_socket_uid(skb);
		flags |= EGR_EVENT_HAS_UID;
	}
	egr_audit_record(&k, &t, flags, &m);
	return 0;
}

/* Takes the sandbox id, not its map value: a pointer kept alive across the
 * judge is one more verifier state per cgroup level the lookup found it at. */
static __always_inline void egr_audit_skb(struct __sk_buff *skb, __u64 sandbox_id,
					  struct egr_decision d)
{
	egr_audit_skb_record(skb, sandbox_id, ((__u32)d.action << 8) | d.reason);
}

#endif
