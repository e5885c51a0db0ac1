/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Per-flow state at the veth (issue 17, maps/egressd_abi.h egr_tcflow_v1).
 * At the cgroup hooks a socket's record carries what connect() decided and
 * tells an accepted connection from an active open; a sandbox judged at its
 * veth (gVisor, a VM) has no socket egressd sees, so two things need a table:
 *   - a TCP connection a peer opened: the SYN going *into* the pod (seen only
 *     by egr_tc_egress, clsact egress of the node end) records the flow, and
 *     the pod's SYN-ACK and the rest of that connection pass at ingress even
 *     from a peer the policy does not allow, as an accepted socket's packets
 *     pass the cgroup backstop.  Nothing the pod sends can create one;
 *   - a flow whose first packet a learned name allowed: it lives on when the
 *     name's entry expires (a connection pool outliving a TTL), ended by TCP
 *     close (FIN, RST) or idleness.  For UDP and other protocols this keeps
 *     only a flow alive: every packet is still judged by the policy, the
 *     flow's state answers only a default-deny that the learned entry's
 *     expiry made, never a protected range; and a peer sending first records
 *     nothing (as in the cgroup mode).
 * A new TCP connection from the pod (a SYN) is judged by the policy alone,
 * whatever the table holds.  Flows a CIDR or the default allowed are not
 * recorded: the same policy allows every packet of them.
 *
 * Each sandbox's count is checked before an insert (a quota, never an
 * eviction); a flow that cannot be tracked is judged per packet (fail
 * closed) and counted.  Expiry: a bpf_timer per entry, armed at insert for
 * the flow's timeout and re-armed by its callback while packets keep coming,
 * deletes it; a lookup treats an entry past its timeout as gone.  Each
 * delete that succeeds, and only it, gives the sandbox's count back. */
#ifndef EGRESSD_BPF_LIB_TC_FLOW_H
#define EGRESSD_BPF_LIB_TC_FLOW_H

#include "lib/tc_veth.h"

#define EGR_CLOCK_BOOTTIME 7 /* the clock of bpf_ktime_get_boot_ns() */
#define EGR_TCP_FIN 0x01
#define EGR_TCP_SYN 0x02
#define EGR_TCP_RST 0x04
#define EGR_TCP_ACK 0x10
#define EGR_NS_PER_S 1000000000ull

/* tc audit records are another change's (issue 17, "tcreject"): this one
 * hook is where a flow the table could not hold is audited; the merge wires
 * it to that change's tc audit call. */
#ifndef EGR_TC_FLOW_AUDIT_UNTRACKED
#define EGR_TC_FLOW_AUDIT_UNTRACKED(skb, sb, d) ((void)0)
#endif

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_FLOWS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct egr_flow_key);
	__type(value, struct egr_flow_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_tcflow_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_IFSANDBOXES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, struct egr_flowcnt_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_flowcnt_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct egr_flowcfg_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_flowcfg_v1 SEC(".maps");

enum egr_flow_track {
	EGR_FLOW_TRACKED = 0,
	EGR_FLOW_OVER_QUOTA,
	EGR_FLOW_NO_ROOM, /* the node-wide map is full, or no timer could be armed */
};

static __always_inline __u32 egr_flow_quota(void)
{
	__u32 zero = 0;
	const struct egr_flowcfg_val *c = bpf_map_lookup_elem(&egr_flowcfg_v1, &zero);

	return c && c->quota ? c->quota : EGR_FLOW_DEFAULT_QUOTA;
}

/* How long the flow lives without a packet: an answered TCP connection
 * that no FIN closes the idle timeout; opening or closing the transitory
 * one; other protocols the UDP one. */
static __always_inline __u64 egr_flow_timeout_ns(__u8 proto, __u8 flags)
{
	__u32 zero = 0;
	const struct egr_flowcfg_val *c = bpf_map_lookup_elem(&egr_flowcfg_v1, &zero);
	__u32 s;

	if (proto == IPPROTO_TCP && (flags & EGR_FLOW_REPLIED) && !(flags & EGR_FLOW_CLOSING))
		s = c && c->tcp_idle_s ? c->tcp_idle_s : EGR_FLOW_DEFAULT_TCP_IDLE_S;
	else if (proto == IPPROTO_TCP)
		s = c && c->tcp_transitory_s ? c->tcp_transitory_s : EGR_FLOW_DEFAULT_TCP_TRANSITORY_S;
	else
		s = c && c->udp_idle_s ? c->udp_idle_s : EGR_FLOW_DEFAULT_UDP_IDLE_S;
	return (__u64)s * EGR_NS_PER_S;
}

static __always_inline struct egr_flowcnt_val *egr_flow_count_of(__u64 sandbox_id)
{
	struct egr_flowcnt_val zero = {}, *c = bpf_map_lookup_elem(&egr_flowcnt_v1, &sandbox_id);

	if (c)
		return c;
	/* A racing creator wins with its own zero: either way it exists. */
	bpf_map_update_elem(&egr_flowcnt_v1, &sandbox_id, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&egr_flowcnt_v1, &sandbox_id);
}

/* Deletes the flow; the one delete that succeeds gives its room back. */
static __always_inline void egr_flow_delete(const struct egr_flow_key *key)
{
	__u64 sandbox_id = key->sandbox_id; /* read before the entry goes */
	struct egr_flowcnt_val *c;

	if (bpf_map_delete_elem(&egr_tcflow_v1, key) != 0)
		return;
	c = bpf_map_lookup_elem(&egr_flowcnt_v1, &sandbox_id);
	if (c)
		__sync_fetch_and_add(&c->flows, -1);
}

/* The entry's timer: deletes it once idle past its timeout, else re-arms
 * for what is left (one wake-up per flow per timeout, none per packet). */
static int egr_flow_expire(void *map, struct egr_flow_key *key, struct egr_flow_val *v)
{
	__u64 now = bpf_ktime_get_boot_ns();
	__u64 deadline = v->last_ns + egr_flow_timeout_ns(key->proto, v->flags);

	if (now < deadline) {
		bpf_timer_start(&v->timer, deadline - now, 0);
		return 0;
	}
	egr_flow_delete(key);
	return 0;
}

/* Records a flow, its sandbox's quota checked first.  A first packet racing
 * on several CPUs may overshoot the quota by one a CPU (no atomic
 * fetch-and-add on the BPF ISA the object is built for): never by more. */
static __always_inline int egr_flow_track(const struct egr_flow_key *key, __u32 policy_id, __u8 flags,
					  __u8 reason)
{
	struct egr_flowcnt_val *c = egr_flow_count_of(key->sandbox_id);
	struct egr_flow_val v = {}, *e;
	__u64 now = bpf_ktime_get_boot_ns();
	long r;

	if (!c)
		return EGR_FLOW_NO_ROOM;
	if (c->flows >= (__s64)egr_flow_quota()) {
		__sync_fetch_and_add(&c->refused_quota, 1);
		return EGR_FLOW_OVER_QUOTA;
	}
	__sync_fetch_and_add(&c->flows, 1);
	v.last_ns = now;
	v.created_ns = now;
	v.policy_id = policy_id;
	v.flags = flags;
	v.reason = reason;
	r = bpf_map_update_elem(&egr_tcflow_v1, key, &v, BPF_NOEXIST);
	if (r != 0) {
		__sync_fetch_and_add(&c->flows, -1);
		if (r == -17 /* EEXIST: another CPU recorded it first */)
			return EGR_FLOW_TRACKED;
		__sync_fetch_and_add(&c->refused_full, 1);
		return EGR_FLOW_NO_ROOM;
	}
	e = bpf_map_lookup_elem(&egr_tcflow_v1, key);
	if (!e) /* already deleted (an RST on another CPU): its room is back */
		return EGR_FLOW_TRACKED;
	/* An entry without a timer would hold its room for ever. */
	if (bpf_timer_init(&e->timer, &egr_tcflow_v1, EGR_CLOCK_BOOTTIME) != 0 ||
	    bpf_timer_set_callback(&e->timer, egr_flow_expire) != 0 ||
	    bpf_timer_start(&e->timer, egr_flow_timeout_ns(key->proto, flags), 0) != 0) {
		egr_flow_delete(key);
		__sync_fetch_and_add(&c->refused_full, 1);
		return EGR_FLOW_NO_ROOM;
	}
	__sync_fetch_and_add(&c->tracked, 1);
	return EGR_FLOW_TRACKED;
}

/* The flow's entry, or NULL; one past its timeout (its timer not yet run)
 * is deleted and reads as none. */
static __always_inline struct egr_flow_val *egr_flow_find(const struct egr_flow_key *key)
{
	struct egr_flow_val *e = bpf_map_lookup_elem(&egr_tcflow_v1, key);

	if (e && bpf_ktime_get_boot_ns() - e->last_ns >= egr_flow_timeout_ns(key->proto, e->flags)) {
		egr_flow_delete(key);
		return NULL;
	}
	return e;
}

/* A packet of the flow, from the pod (from_pod) or to it: refreshes it and
 * follows the TCP close; an RST ends it at once.  A change of state whose
 * timeout is shorter than the one before (a FIN: the transitory timeout after
 * the idle one; an answer, where the idle timeout is the shorter) re-arms the
 * timer for it: armed for the old one, it would fire late and the closed or
 * idle flow hold its sandbox's room past its end.  On a change only (at most
 * twice a flow), never per packet. */
static __always_inline void egr_flow_seen(const struct egr_flow_key *key, struct egr_flow_val *e,
					  const struct egr_pkt *p, int from_pod)
{
	int opener_is_pod = !(e->flags & EGR_FLOW_INBOUND);
	__u8 was = e->flags;
	__u64 shorter;

	if (key->proto == IPPROTO_TCP) {
		if (p->tcp_flags & EGR_TCP_RST) {
			egr_flow_delete(key);
			return;
		}
		if (p->tcp_flags & EGR_TCP_FIN)
			e->flags |= EGR_FLOW_CLOSING;
	}
	if (from_pod != opener_is_pod)
		e->flags |= EGR_FLOW_REPLIED;
	e->last_ns = bpf_ktime_get_boot_ns();
	if (e->flags == was)
		return;
	shorter = egr_flow_timeout_ns(key->proto, e->flags);
	if (shorter < egr_flow_timeout_ns(key->proto, was))
		bpf_timer_start(&e->timer, shorter, 0);
}

/* The key of a packet, the pod's side first.  0: the packet has no flow
 * (a later fragment of a port-bearing protocol, a routing header, an
 * unreadable source). */
static __always_inline int egr_flow_key_of(struct __sk_buff *skb, const struct egr_cgroup_val *sb,
					   const struct egr_pkt *p, int from_pod, struct egr_flow_key *key)
{
	struct egr_addr src = {};
	__u32 ip4;

	if (p->nsegments || (egr_l4_has_ports(p->l4proto) && !p->ports_read))
		return 0;
	if (skb->protocol == bpf_htons(EGR_ETH_P_IP)) {
		if (bpf_skb_load_bytes(skb, EGR_ETH_HLEN + 12, &ip4, 4))
			return 0;
		egr_addr_from_v4(&src, ip4);
	} else if (bpf_skb_load_bytes(skb, EGR_ETH_HLEN + 8, src.b, 16)) {
		return 0;
	}
	key->sandbox_id = sb->sandbox_id;
	key->proto = p->l4proto;
	if (from_pod) {
		__builtin_memcpy(key->pod_addr, src.b, 16);
		__builtin_memcpy(key->peer_addr, p->dst.b, 16);
		key->pod_port = p->sport;
		key->peer_port = p->dport;
	} else {
		__builtin_memcpy(key->pod_addr, p->dst.b, 16);
		__builtin_memcpy(key->peer_addr, src.b, 16);
		key->pod_port = p->dport;
		key->peer_port = p->sport;
	}
	return 1;
}

static __always_inline void egr_flow_untracked(struct __sk_buff *skb, const struct egr_cgroup_val *sb)
{
	egr_tc_count(EGR_TC_STAT_FLOW_UNTRACKED);
	EGR_TC_FLOW_AUDIT_UNTRACKED(skb, sb, egr_decide(EGR_PASS, EGR_REASON_FLOW_UNTRACKED));
}

/* Whether the flow's state answers this denial of the policy's: an inbound
 * connection's packets whatever the policy says of the peer (as an accepted
 * socket's at the cgroup backstop); a learned flow's only where nothing but
 * the default refused (its entry expired), under the policy that allowed it
 * or, after a change, while its learned entry still exists (the change kept
 * a name that learned it, as a connected socket keeps it, EGR_RES_HELD). */
static __always_inline int egr_flow_answers(const struct egr_cgroup_val *sb, const struct egr_flow_key *key,
					    struct egr_flow_val *e, struct egr_decision d)
{
	struct egr_addr peer;

	if (e->flags & EGR_FLOW_INBOUND)
		return d.reason == EGR_REASON_DEFAULT || d.reason == EGR_REASON_PROTECTED;
	if (d.reason != EGR_REASON_DEFAULT)
		return 0;
	if (e->policy_id == sb->policy_id)
		return 1;
	__builtin_memcpy(peer.b, key->peer_addr, 16);
	if (!egr_resolved_allowed(sb->sandbox_id, &peer, EGR_RES_HELD))
		return 0;
	e->policy_id = sb->policy_id;
	return 1;
}

/* The pod's packet (egr_tc_ingress), after the judge: d is its decision and
 * p the packet it parsed.  Returns the decision that stands. */
static __always_inline struct egr_decision egr_tc_flow_out(struct __sk_buff *skb, const struct egr_cgroup_val *sb,
							   const struct egr_pkt *p, struct egr_decision d)
{
	struct egr_flow_key key = {};
	struct egr_flow_val *e;

	/* Only the policy's own verdict on the destination: structural
	 * refusals (spoofed, frames, malformed, DNS, loopback, routing hops)
	 * and link-local passes are never the table's. */
	if (d.reason != EGR_REASON_RESOLVED && d.reason != EGR_REASON_DEFAULT &&
	    d.reason != EGR_REASON_PROTECTED)
		return d;
	if (!egr_flow_key_of(skb, sb, p, 1, &key))
		return d;
	if (egr_passes(d)) {
		if (d.reason != EGR_REASON_RESOLVED)
			return d;
		e = egr_flow_find(&key);
		if (e) {
			egr_flow_seen(&key, e, p, 1);
			return d;
		}
		/* TCP is recorded at its SYN only: a later segment the table
		 * missed (over quota then) stays judged per packet. */
		if (key.proto == IPPROTO_TCP && !p->opens_tcp)
			return d;
		if (egr_flow_track(&key, sb->policy_id, 0, EGR_REASON_RESOLVED) != EGR_FLOW_TRACKED)
			egr_flow_untracked(skb, sb);
		return d;
	}
	/* A denial (or an audit-only sandbox's would-deny).  A new connection
	 * is the policy's alone. */
	if (key.proto == IPPROTO_TCP && p->opens_tcp)
		return d;
	e = egr_flow_find(&key);
	if (!e || !egr_flow_answers(sb, &key, e, d))
		return d;
	egr_flow_seen(&key, e, p, 1);
	return egr_decide(EGR_PASS, EGR_REASON_FLOW);
}

/* A packet into the pod (egr_tc_egress): refreshes the flow it belongs to,
 * and a TCP SYN (without ACK) from a peer records an inbound connection.
 * Nothing going into the pod is refused here. */
static __always_inline void egr_tc_flow_in(struct __sk_buff *skb, const struct egr_cgroup_val *sb)
{
	struct egr_flow_key key = {};
	struct egr_pkt p = {};
	struct egr_flow_val *e;

	if (sb->kind != EGR_CG_SANDBOX)
		return;
	if (egr_parse_packet(skb, EGR_ETH_HLEN, &p) != EGR_PARSE_OK)
		return;
	if (!egr_flow_key_of(skb, sb, &p, 0, &key))
		return;
	e = egr_flow_find(&key);
	if (e) {
		/* The same 4-tuple opened again after a close (TIME_WAIT reuse):
		 * a fresh inbound connection. */
		if ((e->flags & EGR_FLOW_INBOUND) && (e->flags & EGR_FLOW_CLOSING) &&
		    (p.tcp_flags & (EGR_TCP_SYN | EGR_TCP_ACK | EGR_TCP_RST)) == EGR_TCP_SYN)
			e->flags = EGR_FLOW_INBOUND;
		egr_flow_seen(&key, e, &p, 0);
		return;
	}
	if (key.proto != IPPROTO_TCP ||
	    (p.tcp_flags & (EGR_TCP_SYN | EGR_TCP_ACK | EGR_TCP_RST | EGR_TCP_FIN)) != EGR_TCP_SYN)
		return;
	if (egr_flow_track(&key, sb->policy_id, EGR_FLOW_INBOUND, EGR_REASON_INBOUND_TCP) != EGR_FLOW_TRACKED)
		egr_flow_untracked(skb, sb);
}

#endif
