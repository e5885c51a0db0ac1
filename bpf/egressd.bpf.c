/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* egressd's kernel data path: thin SEC() wrappers over bpf/lib/.  Attached at
 * the cgroup2 root with bpf_link (multi-attach), so every cgroup is seen and
 * the sandbox lookup decides what applies.  bpf/lib returns decisions; each
 * wrapper finds the sandbox, counts, and maps the decision to the return
 * codes of its program type. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "lib/decision.h"
#include "lib/sandbox.h"
#include "lib/sock_addr.h"
#include "lib/backstop.h"
#include "lib/sockopt.h"
#include "lib/lsm_socket.h"
#include "lib/lsm_unix.h"
#include "lib/audit.h"
#include "lib/audit_mode.h"
#include "lib/tc_veth.h"
#include "lib/tc_reject.h"
#include "lib/tc_audit.h"
/* A flow the table cannot hold is judged per packet and audited as such:
 * the flow step marks it in the skb's scratch (cb[0], the tc program's own)
 * and the program records it after the step returns, so the audit's frame
 * never stacks on the flow step's (the verifier's 512 bytes). */
#define EGR_TC_CB_FLOW_UNTRACKED 0
#define EGR_TC_FLOW_AUDIT_UNTRACKED(skb, sb, d) ((skb)->cb[EGR_TC_CB_FLOW_UNTRACKED] = 1)
#include "lib/tc_flow.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* sock_addr: 1 lets the call proceed, 0 fails it with EPERM.  A silent drop
 * lets it proceed: the backstop then drops every packet of the socket, which
 * to the caller looks like an unreachable host (a timeout). */
static __always_inline int egr_sock_addr_code(struct egr_decision d)
{
	return d.action == EGR_DENY_REJECT ? 0 : 1;
}

/* cgroup_skb egress: 1 passes; 0 drops and the sending call sees EPERM; 2
 * drops and reports congestion (NET_XMIT_CN), which a sender takes as sent. */
static __always_inline int egr_cgroup_skb_code(struct egr_decision d)
{
	if (egr_lets_through(d)) /* a would-deny too */
		return 1;
	return d.action == EGR_DENY_DROP ? 2 : 0;
}

static __always_inline int egr_sock_addr(struct bpf_sock_addr *ctx, int is_v4, int is_connect)
{
	const struct egr_cgroup_val *sb = egr_sandbox_of_current();
	struct egr_decision d = egr_sock_addr_judge(ctx, sb, is_v4, is_connect);

	if (!egr_audit_sock_addr(ctx, sb, d, is_v4, is_connect))
		d = egr_audit_strict(ctx, sb, d, is_connect);
	egr_count_decision(d, is_connect ? EGR_STAT_CONNECT_ALLOW : EGR_STAT_SENDMSG_ALLOW,
			   is_connect ? EGR_STAT_CONNECT_DENY : EGR_STAT_SENDMSG_DENY);
	return egr_sock_addr_code(d);
}

SEC("cgroup/connect4")
int egr_connect4(struct bpf_sock_addr *ctx)
{
	return egr_sock_addr(ctx, 1, 1);
}

SEC("cgroup/connect6")
int egr_connect6(struct bpf_sock_addr *ctx)
{
	return egr_sock_addr(ctx, 0, 1);
}

SEC("cgroup/sendmsg4")
int egr_sendmsg4(struct bpf_sock_addr *ctx)
{
	return egr_sock_addr(ctx, 1, 0);
}

SEC("cgroup/sendmsg6")
int egr_sendmsg6(struct bpf_sock_addr *ctx)
{
	return egr_sock_addr(ctx, 0, 0);
}

/* The network header starts the skb: cgroup_skb runs at L3. */
SEC("cgroup_skb/egress")
int egr_skb_egress(struct __sk_buff *skb)
{
	const struct egr_cgroup_val *sb = egr_sandbox_of_skb(skb);
	__u64 sandbox_id = sb ? sb->sandbox_id : 0;
	struct egr_decision d = egr_backstop_judge(skb, 0, sb);

	egr_count_decision(d, EGR_STAT_SKB_PASS, EGR_STAT_SKB_DROP);
	egr_audit_skb(skb, sandbox_id, d);
	return egr_cgroup_skb_code(d);
}

/* cgroup/setsockopt: 1 lets the kernel apply the option, 0 fails the call
 * with EPERM.  Run in the caller's context, so the caller's sandbox judges
 * (a socket handed in over SCM_RIGHTS is judged by its new owner). */
SEC("cgroup/setsockopt")
int egr_setsockopt(struct bpf_sockopt *ctx)
{
	struct egr_sockopt o;
	struct egr_decision d;

	egr_sockopt_read(ctx, &o);
	d = egr_sockopt_judge(&o, egr_sandbox_of_task());
	egr_count_refusal(d, EGR_STAT_SOCKOPT_DENY);

	return d.action == EGR_PASS ? 1 : 0;
}

/* BPF LSM: a nonzero ret is an earlier LSM's refusal, kept; otherwise 0
 * allows and -EPERM (-1) refuses.  Attached globally (LSM hooks have no
 * cgroup attachment on 6.1); lib/lsm_sandbox.h scopes them to sandboxes. */
#define EGR_LSM_EPERM (-1)

static __always_inline int egr_lsm_code(struct egr_decision d)
{
	egr_count_refusal(d, EGR_STAT_LSM_DENY);
	return egr_passes(d) ? 0 : EGR_LSM_EPERM;
}

SEC("lsm/socket_create")
int BPF_PROG(egr_socket_create, int family, int type, int protocol, int kern, int ret)
{
	if (ret)
		return ret;
	return egr_lsm_code(egr_socket_create_judge(family, kern));
}

SEC("lsm/socket_sendmsg")
int BPF_PROG(egr_socket_sendmsg, struct socket *sock, struct msghdr *msg, int size, int ret)
{
	if (ret)
		return ret;
	return egr_lsm_code(egr_socket_sendmsg_judge(sock));
}

SEC("lsm/unix_stream_connect")
int BPF_PROG(egr_unix_connect, struct sock *sock, struct sock *other, struct sock *newsk, int ret)
{
	if (ret)
		return ret;
	return egr_lsm_code(egr_unix_peer_judge(other));
}

SEC("lsm/unix_may_send")
int BPF_PROG(egr_unix_may_send, struct socket *sock, struct socket *other, int ret)
{
	if (ret)
		return ret;
	return egr_lsm_code(egr_unix_peer_judge(other ? BPF_CORE_READ(other, sk) : NULL));
}

/* recvmsg4/6 (unconnected UDP) and getpeername4/6: a redirected DNS socket
 * sees its resolver, not its endpoint (lib/dns_redirect.h).  These program
 * types must return 1. */
SEC("cgroup/recvmsg4")
int egr_recvmsg4(struct bpf_sock_addr *ctx)
{
	egr_dns_restore_peer4(ctx);
	return 1;
}

SEC("cgroup/recvmsg6")
int egr_recvmsg6(struct bpf_sock_addr *ctx)
{
	egr_dns_restore_peer6(ctx);
	return 1;
}

SEC("cgroup/getpeername4")
int egr_getpeername4(struct bpf_sock_addr *ctx)
{
	egr_dns_restore_peer4(ctx);
	return 1;
}

SEC("cgroup/getpeername6")
int egr_getpeername6(struct bpf_sock_addr *ctx)
{
	egr_dns_restore_peer6(ctx);
	return 1;
}

/* A released socket lets go of the learned address its connect() held
 * (lib/resolved_use.h).  This program type must return 1. */
SEC("cgroup/sock_release")
int egr_sock_release(struct bpf_sock *sk)
{
	struct egr_sock_val *st = bpf_sk_storage_get(&egr_sock_v2, sk, 0, 0);

	if (st)
		egr_use_drop(st);
	return 1;
}

/* tc clsact ingress of a sandbox's host-side veth (the pod's egress; issue
 * 17): TC_ACT_OK passes, TC_ACT_SHOT drops, TC_ACT_REDIRECT sends the skb,
 * rewritten into a denial's answer (lib/tc_reject.h), back out of the same
 * interface into the pod.  An interface with no sandbox entry passes (the
 * program is attached only to registered interfaces, and their entry is
 * written before the attach and removed after the detach). */
#define EGR_TC_ACT_OK 0
#define EGR_TC_ACT_SHOT 2

/* The flow table's step as a subprogram of its own (static: verified in
 * egr_tc_ingress's context): its keys and values then take no room in the
 * program's own frame, which with egr_tc_reject_packet's must stay within
 * the verifier's 512 bytes of combined stack. */
static __noinline int egr_tc_flow_out_packed(struct __sk_buff *skb, const struct egr_cgroup_val *sb,
					     const struct egr_pkt *p, int packed)
{
	return egr_decision_pack(egr_tc_flow_out(skb, sb, p, egr_decision_unpack(packed)));
}

/* The judge as a subprogram too: the parse, anti-spoofing and DNS steering
 * locals live in its frame, not in the program's beside the reject and audit
 * steps' (each a global function with a frame of its own). */
static __noinline int egr_tc_judge_packed(struct __sk_buff *skb, const struct egr_cgroup_val *sb,
					  struct egr_pkt *p)
{
	return egr_decision_pack(egr_tc_judge(skb, sb, p));
}

SEC("tc")
int egr_tc_ingress(struct __sk_buff *skb)
{
	const struct egr_cgroup_val *sb = egr_sandbox_of_ifindex(skb->ifindex);
	struct egr_pkt p = {};
	struct egr_decision d;

	if (!sb)
		return EGR_TC_ACT_OK;
	d = egr_decision_unpack(egr_tc_judge_packed(skb, sb, &p));
	skb->cb[EGR_TC_CB_FLOW_UNTRACKED] = 0;
	d = egr_decision_unpack(egr_tc_flow_out_packed(skb, sb, &p, egr_decision_pack(d)));
	if (skb->cb[EGR_TC_CB_FLOW_UNTRACKED])
		egr_tc_audit(skb, sb, egr_decide(EGR_PASS, EGR_REASON_FLOW_UNTRACKED));
	if (!egr_tc_audit(skb, sb, d))
		d = egr_tc_audit_strict(d);
	if (egr_lets_through(d)) {
		egr_tc_count(d.reason == EGR_REASON_LINK_LOCAL ? EGR_TC_STAT_LINK_LOCAL
			     : d.reason == EGR_REASON_FLOW     ? EGR_TC_STAT_FLOW_PASS
							       : EGR_TC_STAT_PASS);
		return EGR_TC_ACT_OK;
	}
	egr_tc_count(d.reason == EGR_REASON_FRAME     ? EGR_TC_STAT_FRAME_DROP
		     : d.reason == EGR_REASON_SPOOFED ? EGR_TC_STAT_SPOOFED
						      : EGR_TC_STAT_DROP);
	if (d.action == EGR_DENY_REJECT && egr_tc_reject(skb, sb) == EGR_TC_REJECTED_SENT)
		return bpf_redirect(skb->ifindex, 0);
	return EGR_TC_ACT_SHOT;
}

/* tc clsact egress of the same interfaces: what goes into the pod.  The
 * answers of the pod's steered DNS queries get back the source the pod asked
 * (lib/tc_dns.h); an endpoint's packet no query explains is dropped.  Nothing
 * else is refused here: it records the flows the pod did not open
 * (lib/tc_flow.h: a TCP SYN from a peer) and refreshes every tracked flow.
 * Attached and detached with egr_tc_ingress (loader/tc_attach.h). */
SEC("tc")
int egr_tc_egress(struct __sk_buff *skb)
{
	const struct egr_cgroup_val *sb = egr_sandbox_of_ifindex(skb->ifindex);
	struct egr_decision d;

	if (!sb)
		return EGR_TC_ACT_OK;
	d = egr_tc_dns_restore(skb, sb);
	if (!egr_lets_through(d)) {
		egr_tc_count(EGR_TC_STAT_DNS_UNMATCHED);
		return EGR_TC_ACT_SHOT;
	}
	skb->cb[EGR_TC_CB_FLOW_UNTRACKED] = 0;
	egr_tc_flow_in(skb, sb);
	if (skb->cb[EGR_TC_CB_FLOW_UNTRACKED])
		egr_tc_audit(skb, sb, egr_decide(EGR_PASS, EGR_REASON_FLOW_UNTRACKED));
	return EGR_TC_ACT_OK;
}
