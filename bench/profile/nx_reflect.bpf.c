/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Experiment, not egressd: the floor of a local NXDOMAIN answered in the
 * kernel at the pod's veth (issue 12's denied rows; notes section 10).
 *
 * On the tc ingress of the node end of a pod's veth, an IPv4 UDP query to
 * the sandbox's DNS endpoint (ENDPOINT_ADDR:ENDPOINT_PORT, set with -D at
 * build time by bench/profile/nx_reflect_serve.sh) is turned into its own
 * answer in place: Ethernet, IP and UDP endpoints swapped, QR and RA set,
 * RCODE NXDOMAIN, the question kept, no other section; the UDP checksum
 * cleared (optional for IPv4), the IP checksum unchanged (swapping source
 * and destination leaves its sum the same); then redirected out of the same
 * device, back into the pod.  No process is woken: the answer is made in
 * the softirq that received the query.  Everything else passes.
 *
 * It decides nothing (every query to the endpoint gets NXDOMAIN) and writes
 * no audit record: it prices the packet's path alone, as egr-min-relay
 * (bench/min_relay.cc) prices a user-space hop's, so the denied rows can say
 * what a kernel answer would gain before anyone builds one. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#ifndef ENDPOINT_ADDR
#error "build with -DENDPOINT_ADDR=<IPv4 address as a host-order integer>"
#endif
#ifndef ENDPOINT_PORT
#error "build with -DENDPOINT_PORT=<port>"
#endif

#define ETH_P_IPV4 0x0800
#define L3 14

SEC("tc")
int nx_reflect(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + L3;
	struct udphdr *udp;
	__u8 *dns;

	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IPV4))
		return 0; /* TC_ACT_OK */
	if (ip->ihl != 5 || ip->protocol != IPPROTO_UDP || (ip->frag_off & bpf_htons(0x3fff)))
		return 0;
	udp = (void *)(ip + 1);
	dns = (__u8 *)(udp + 1);
	if ((void *)(dns + 12) > end)
		return 0;
	if (ip->daddr != bpf_htonl(ENDPOINT_ADDR) || udp->dest != bpf_htons(ENDPOINT_PORT))
		return 0;
	if (dns[2] & 0x80) /* already an answer */
		return 0;

	__u8 mac[6];
	__builtin_memcpy(mac, eth->h_source, 6);
	__builtin_memcpy(eth->h_source, eth->h_dest, 6);
	__builtin_memcpy(eth->h_dest, mac, 6);
	__be32 a = ip->saddr;
	ip->saddr = ip->daddr;
	ip->daddr = a;
	__be16 p = udp->source;
	udp->source = udp->dest;
	udp->dest = p;
	udp->check = 0;
	dns[2] = (dns[2] & 0x79) | 0x80; /* QR, the opcode and RD kept, AA/TC clear */
	dns[3] = 0x80 | 3;               /* RA, NXDOMAIN */
	dns[6] = dns[7] = dns[8] = dns[9] = dns[10] = dns[11] = 0; /* the question alone */
	/* A query with EDNS or more sections carries bytes after its question;
	 * the answer keeps them in the packet but counts none of them, which
	 * stub resolvers and egr-dns-load ignore. */
	return bpf_redirect(skb->ifindex, 0);
}
