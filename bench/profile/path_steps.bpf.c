/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Experiment, not egressd: egr_skb_egress and egr_connect4 (bpf/egressd.bpf.c)
 * cut after each of their steps, so the steps are priced by difference: the
 * backstop's s<N> by BPF_PROG_TEST_RUN, connect4's c<N> by bpf_stats over a
 * connect loop with one variant attached at a time (sock_addr programs have
 * no test_run)
 * (bench/profile/kernel_paths.cc loads this object on the pinned maps of an
 * instance `egressctl load` made, so every lookup hits the real maps and
 * entries).  Each s<N> program does what s<N-1> does and one step more, in
 * the backstop's order; s8 is the whole program.  The steps are bpf/lib's own
 * functions, called as the backstop calls them; what a step returns is
 * folded into the return code (always 1) so the compiler keeps it.  Two
 * more programs price the parts of the fast path the notes propose. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "lib/decision.h"
#include "lib/sandbox.h"
#include "lib/sock_addr.h"
#include "lib/backstop.h"
#include "lib/audit.h"
#include "lib/audit_mode.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define KEEP(x) ((x) ? 1 : 1)

SEC("cgroup_skb/egress")
int s0_empty(struct __sk_buff *skb)
{
	return 1;
}

/* lib/sandbox.h: bpf_skb_ancestor_cgroup_id per level, a hash lookup each. */
SEC("cgroup_skb/egress")
int s1_walk(struct __sk_buff *skb)
{
	return KEEP(egr_sandbox_of_skb(skb));
}

/* + the policy's hash lookup. */
SEC("cgroup_skb/egress")
int s2_policy(struct __sk_buff *skb)
{
	const struct egr_cgroup_val *sb = egr_sandbox_of_skb(skb);

	if (!sb)
		return 1;
	return KEEP(bpf_map_lookup_elem(&egr_policy_v1, &sb->policy_id));
}

/* + the header parse (a global function: bpf_skb_load_bytes of the IP
 * header, the ports and the TCP flags). */
SEC("cgroup_skb/egress")
int s3_parse(struct __sk_buff *skb)
{
	const struct egr_cgroup_val *sb = egr_sandbox_of_skb(skb);
	struct egr_pkt p = {};
	void *pol;

	if (!sb)
		return 1;
	pol = bpf_map_lookup_elem(&egr_policy_v1, &sb->policy_id);
	return KEEP(egr_parse_packet_once(skb, 0, &p) + (pol != 0));
}

/* + bpf_sk_fullsock and the socket's storage (lookup, no create). */
SEC("cgroup_skb/egress")
int s4_storage(struct __sk_buff *skb)
{
	const struct egr_cgroup_val *sb = egr_sandbox_of_skb(skb);
	struct egr_sock_val *st = NULL;
	struct bpf_sock *sk;
	struct egr_pkt p = {};
	void *pol;

	if (!sb)
		return 1;
	pol = bpf_map_lookup_elem(&egr_policy_v1, &sb->policy_id);
	if (egr_parse_packet_once(skb, 0, &p) || !pol)
		return 1;
	sk = skb->sk;
	if (sk)
		sk = bpf_sk_fullsock(sk);
	if (sk)
		st = bpf_sk_storage_get(&egr_sock_v2, sk, 0, 0);
	return KEEP(st);
}

/* + lib/dns_redirect.h's backstop step (the endpoint hash lookup). */
SEC("cgroup_skb/egress")
int s5_dns(struct __sk_buff *skb)
{
	const struct egr_cgroup_val *sb = egr_sandbox_of_skb(skb);
	struct egr_sock_val *st = NULL;
	struct bpf_sock *sk;
	struct egr_pkt p = {};
	void *pol;

	if (!sb)
		return 1;
	pol = bpf_map_lookup_elem(&egr_policy_v1, &sb->policy_id);
	if (egr_parse_packet_once(skb, 0, &p) || !pol)
		return 1;
	sk = skb->sk;
	if (sk)
		sk = bpf_sk_fullsock(sk);
	if (sk)
		st = bpf_sk_storage_get(&egr_sock_v2, sk, 0, 0);
	return KEEP(egr_dns_backstop(sb, st, &p.dst, p.dport, p.nsegments));
}

/* + the policy's judgement (lib/verdict.h through lib/judge_once.h: the
 * protected and allowed LPM lookups, then the learned-address hash and the
 * boot clock when no CIDR allowed it). */
SEC("cgroup_skb/egress")
int s6_judge(struct __sk_buff *skb)
{
	const struct egr_cgroup_val *sb = egr_sandbox_of_skb(skb);
	struct egr_sock_val *st = NULL;
	struct egr_policy_val *pol;
	struct bpf_sock *sk;
	struct egr_pkt p = {};

	if (!sb)
		return 1;
	pol = bpf_map_lookup_elem(&egr_policy_v1, &sb->policy_id);
	if (egr_parse_packet_once(skb, 0, &p) || !pol)
		return 1;
	sk = skb->sk;
	if (sk)
		sk = bpf_sk_fullsock(sk);
	if (sk)
		st = bpf_sk_storage_get(&egr_sock_v2, sk, 0, 0);
	if (egr_dns_backstop(sb, st, &p.dst, p.dport, p.nsegments) != EGR_DNS_NOT_DNS)
		return 1;
	return KEEP(egr_passes(egr_judge_use_once(sb, pol, &p.dst, p.dport, EGR_RES_SEND)));
}

/* The backstop's judge as it is (every shortcut included), + the counter. */
SEC("cgroup_skb/egress")
int s7_count(struct __sk_buff *skb)
{
	const struct egr_cgroup_val *sb = egr_sandbox_of_skb(skb);
	struct egr_decision d = egr_backstop_judge(skb, 0, sb);

	egr_count_decision(d, EGR_STAT_SKB_PASS, EGR_STAT_SKB_DROP);
	return KEEP(d.action);
}

/* + the audit step: egr_skb_egress itself. */
SEC("cgroup_skb/egress")
int s8_full(struct __sk_buff *skb)
{
	const struct egr_cgroup_val *sb = egr_sandbox_of_skb(skb);
	__u64 sandbox_id = sb ? sb->sandbox_id : 0;
	struct egr_decision d = egr_backstop_judge(skb, 0, sb);

	egr_count_decision(d, EGR_STAT_SKB_PASS, EGR_STAT_SKB_DROP);
	egr_audit_skb(skb, sandbox_id, d);
	return KEEP(d.action);
}

/* The proposed fast path's own cost: the socket's storage (created on the
 * first run: test_run reuses one dummy socket for every repeat) and a
 * generation read from a one-slot array, compared with what the storage
 * holds.  No walk, no policy lookup, no parse, no DNS step. */
SEC("cgroup_skb/egress")
int f1_storage_gen(struct __sk_buff *skb)
{
	struct egr_sock_val *st;
	const struct egr_config_val *cfg;
	struct bpf_sock *sk = skb->sk;

	if (!sk)
		return 1;
	sk = bpf_sk_fullsock(sk);
	if (!sk)
		return 1;
	st = bpf_sk_storage_get(&egr_sock_v2, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	cfg = egr_config();
	return KEEP(st && cfg && st->policy_id == *(const __u32 *)cfg);
}

/* The same with the header's destination and ports read and compared (the
 * packet's real header, as the backstop must judge it). */
SEC("cgroup_skb/egress")
int f2_storage_gen_parse(struct __sk_buff *skb)
{
	struct egr_sock_val *st;
	const struct egr_config_val *cfg;
	struct bpf_sock *sk = skb->sk;
	struct egr_pkt p = {};

	if (!sk)
		return 1;
	sk = bpf_sk_fullsock(sk);
	if (!sk)
		return 1;
	st = bpf_sk_storage_get(&egr_sock_v2, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	cfg = egr_config();
	if (egr_parse_packet_once(skb, 0, &p))
		return 1;
	return KEEP(st && cfg && st->policy_id == *(const __u32 *)cfg && egr_addr_eq(&p.dst, st->addr) &&
		    st->port == bpf_htons(p.dport));
}

/* ---- connect4 ---- */

SEC("cgroup/connect4")
int c0_empty(struct bpf_sock_addr *ctx)
{
	return 1;
}

/* lib/sandbox.h: bpf_get_current_ancestor_cgroup_id per level, a hash lookup each. */
SEC("cgroup/connect4")
int c1_walk(struct bpf_sock_addr *ctx)
{
	return KEEP(egr_sandbox_of_current());
}

/* + the destination, the config array and bpf_get_netns_cookie (is the
 * caller in the node's netns?). */
SEC("cgroup/connect4")
int c2_netns(struct bpf_sock_addr *ctx)
{
	const struct egr_cgroup_val *sb = egr_sandbox_of_current();
	struct egr_addr dst;

	if (!sb)
		return 1;
	egr_sock_addr_dst(ctx, 1, &dst);
	return KEEP(egr_in_foreign_netns(ctx) + dst.w[3]);
}

/* + lib/dns_redirect.h (not port 53: the endpoint hash lookup). */
SEC("cgroup/connect4")
int c3_dns(struct bpf_sock_addr *ctx)
{
	const struct egr_cgroup_val *sb = egr_sandbox_of_current();
	struct egr_addr dst;
	int foreign;

	if (!sb)
		return 1;
	egr_sock_addr_dst(ctx, 1, &dst);
	foreign = egr_in_foreign_netns(ctx);
	return KEEP(egr_dns_redirect(ctx, sb, &dst, 1, 1, foreign ? EGR_SOCK_FOREIGN_NETNS : 0));
}

/* + the policy lookup and the judgement (protected and allowed LPM lookups;
 * the learned-address hash and the boot clock when no CIDR allowed it). */
SEC("cgroup/connect4")
int c4_judge(struct bpf_sock_addr *ctx)
{
	const struct egr_cgroup_val *sb = egr_sandbox_of_current();
	struct egr_policy_val *pol;
	struct egr_addr dst;
	int foreign;

	if (!sb)
		return 1;
	egr_sock_addr_dst(ctx, 1, &dst);
	foreign = egr_in_foreign_netns(ctx);
	if (egr_dns_redirect(ctx, sb, &dst, 1, 1, foreign ? EGR_SOCK_FOREIGN_NETNS : 0) != EGR_DNS_NOT_DNS)
		return 1;
	pol = bpf_map_lookup_elem(&egr_policy_v1, &sb->policy_id);
	if (!pol)
		return 1;
	return KEEP(egr_passes(egr_judge_use_once(sb, pol, &dst, bpf_ntohs((__u16)ctx->user_port), EGR_RES_NEW)));
}

/* + the socket's record: egr_sock_addr_judge as it is (storage created). */
SEC("cgroup/connect4")
int c5_note(struct bpf_sock_addr *ctx)
{
	const struct egr_cgroup_val *sb = egr_sandbox_of_current();

	return KEEP(egr_sock_addr_judge(ctx, sb, 1, 1).action);
}

/* + the audit record (budget, ring reserve/submit or fold) and the strict
 * check: egr_connect4 without its counter. */
SEC("cgroup/connect4")
int c6_audit(struct bpf_sock_addr *ctx)
{
	const struct egr_cgroup_val *sb = egr_sandbox_of_current();
	struct egr_decision d = egr_sock_addr_judge(ctx, sb, 1, 1);

	if (!egr_audit_sock_addr(ctx, sb, d, 1, 1))
		d = egr_audit_strict(ctx, sb, d, 1);
	return KEEP(d.action);
}

/* + the counter: egr_connect4 itself. */
SEC("cgroup/connect4")
int c7_full(struct bpf_sock_addr *ctx)
{
	const struct egr_cgroup_val *sb = egr_sandbox_of_current();
	struct egr_decision d = egr_sock_addr_judge(ctx, sb, 1, 1);

	if (!egr_audit_sock_addr(ctx, sb, d, 1, 1))
		d = egr_audit_strict(ctx, sb, d, 1);
	egr_count_decision(d, EGR_STAT_CONNECT_ALLOW, EGR_STAT_CONNECT_DENY);
	return d.action == EGR_DENY_REJECT ? 0 : 1;
}

/* The audit step alone on an allowed connect (no storage): what recording
 * every connect costs. */
SEC("cgroup/connect4")
int c8_audit_only_step(struct bpf_sock_addr *ctx)
{
	const struct egr_cgroup_val *sb = egr_sandbox_of_current();

	if (!sb)
		return 1;
	return KEEP(egr_audit_sock_addr(ctx, sb, egr_decide(EGR_PASS, EGR_REASON_ALLOWED), 1, 1));
}
