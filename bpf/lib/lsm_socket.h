/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Socket families a sandbox may use (BPF LSM socket_create / socket_sendmsg).
 * The cgroup hooks judge only what passes the IP stack; a packet socket, an
 * AF_XDP socket or AF_VSOCK never does.  So a sandbox gets an allowlist of
 * families, not a denylist that a family we did not think of walks around:
 *   AF_INET, AF_INET6 (raw ones too: their sends pass cgroup_skb egress),
 *   AF_UNIX (abstract peers are judged by lib/lsm_unix.h), AF_NETLINK, and
 *   AF_PACKET only in a network namespace that is not the node's, where it
 *   can see only that namespace's own traffic, and only to receive: every
 *   send on a packet socket from a sandbox is refused (lsm/socket_sendmsg is
 *   the one gate of send, sendto, sendmsg, sendmmsg, write, io_uring SEND,
 *   SENDMSG and SEND_ZC, PACKET_TX_RING's flush and splice/sendfile). */
#ifndef EGRESSD_BPF_LIB_LSM_SOCKET_H
#define EGRESSD_BPF_LIB_LSM_SOCKET_H

#include "lib/decision.h"
#include "lib/lsm_sandbox.h"

/* include/linux/socket.h (vmlinux.h has no macros). */
#define EGR_AF_UNIX 1
#define EGR_AF_INET 2
#define EGR_AF_INET6 10
#define EGR_AF_NETLINK 16
#define EGR_AF_PACKET 17

/* The netns the caller's new socket lands in: socket() uses current's. */
static __always_inline int egr_current_in_node_netns(void)
{
	const struct egr_config_val *cfg = egr_config();
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 cookie = BPF_CORE_READ(task, nsproxy, net_ns, net_cookie);

	/* No node recorded yet: every netns counts as the node's (fail closed). */
	return !cfg || cfg->node_netns_cookie == 0 || cfg->node_netns_cookie == cookie;
}

static __always_inline struct egr_decision egr_socket_create_judge(int family, int kern)
{
	/* Sockets the kernel makes for itself (e.g. a filesystem's) are not the
	 * caller's to hold. */
	if (kern || !egr_lsm_sandbox_of_current())
		return egr_decide(EGR_PASS, EGR_REASON_NOT_SANDBOX);
	switch (family) {
	case EGR_AF_INET:
	case EGR_AF_INET6:
	case EGR_AF_UNIX:
	case EGR_AF_NETLINK:
		return egr_decide(EGR_PASS, EGR_REASON_ALLOWED);
	case EGR_AF_PACKET:
		if (!egr_current_in_node_netns())
			return egr_decide(EGR_PASS, EGR_REASON_ALLOWED);
		return egr_decide(EGR_DENY_REJECT, EGR_REASON_FAMILY);
	default:
		return egr_decide(EGR_DENY_REJECT, EGR_REASON_FAMILY);
	}
}

/* Judged by the caller, not the socket's creator: a packet socket passed into
 * a sandbox is as receive-only there as one it made. */
static __always_inline struct egr_decision egr_socket_sendmsg_judge(struct socket *sock)
{
	__u16 family = BPF_CORE_READ(sock, sk, __sk_common.skc_family);

	if (family != EGR_AF_PACKET || !egr_lsm_sandbox_of_current())
		return egr_decide(EGR_PASS, EGR_REASON_NOT_SANDBOX);
	return egr_decide(EGR_DENY_REJECT, EGR_REASON_FAMILY);
}

#endif
