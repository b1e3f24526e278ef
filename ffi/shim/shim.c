/* ferrule-ffi shim: exported wrappers around DPDK's `static inline` functions. */
#include "shim.h"
#include <rte_prefetch.h>
#include <rte_pause.h>

uint16_t ferrule_eth_rx_burst(uint16_t port_id, uint16_t queue_id,
                              struct rte_mbuf **rx_pkts, uint16_t nb_pkts)
{
	return rte_eth_rx_burst(port_id, queue_id, rx_pkts, nb_pkts);
}

uint16_t ferrule_eth_tx_burst(uint16_t port_id, uint16_t queue_id,
                              struct rte_mbuf **tx_pkts, uint16_t nb_pkts)
{
	return rte_eth_tx_burst(port_id, queue_id, tx_pkts, nb_pkts);
}

struct rte_mbuf *ferrule_pktmbuf_alloc(struct rte_mempool *mp)
{
	return rte_pktmbuf_alloc(mp);
}

int ferrule_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs,
                               unsigned int count)
{
	return rte_pktmbuf_alloc_bulk(mp, mbufs, count);
}

void ferrule_pktmbuf_free(struct rte_mbuf *m)
{
	rte_pktmbuf_free(m);
}

void ferrule_pktmbuf_free_bulk(struct rte_mbuf **mbufs, unsigned int count)
{
	rte_pktmbuf_free_bulk(mbufs, count);
}

void *ferrule_pktmbuf_data(const struct rte_mbuf *m)
{
	return rte_pktmbuf_mtod(m, void *);
}

uint16_t ferrule_pktmbuf_data_len(const struct rte_mbuf *m)
{
	return m->data_len;
}

uint32_t ferrule_pktmbuf_pkt_len(const struct rte_mbuf *m)
{
	return m->pkt_len;
}

uint16_t ferrule_pktmbuf_nb_segs(const struct rte_mbuf *m)
{
	return m->nb_segs;
}

uint16_t ferrule_pktmbuf_headroom(const struct rte_mbuf *m)
{
	return rte_pktmbuf_headroom(m);
}

uint16_t ferrule_pktmbuf_tailroom(const struct rte_mbuf *m)
{
	return rte_pktmbuf_tailroom(m);
}

char *ferrule_pktmbuf_append(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_append(m, len);
}

int ferrule_pktmbuf_trim(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_trim(m, len);
}

char *ferrule_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_prepend(m, len);
}

char *ferrule_pktmbuf_adj(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_adj(m, len);
}

uint16_t ferrule_mbuf_port(const struct rte_mbuf *m)
{
	return m->port;
}

unsigned int ferrule_ring_enqueue_burst(struct rte_ring *r, void *const *objs,
                                        unsigned int n)
{
	return rte_ring_enqueue_burst(r, objs, n, NULL);
}

unsigned int ferrule_ring_dequeue_burst(struct rte_ring *r, void **objs,
                                        unsigned int n)
{
	return rte_ring_dequeue_burst(r, objs, n, NULL);
}

unsigned int ferrule_ring_count(const struct rte_ring *r)
{
	return rte_ring_count(r);
}

int ferrule_errno(void)
{
	return rte_errno;
}

unsigned int ferrule_lcore_id(void)
{
	return rte_lcore_id();
}

uint64_t ferrule_rdtsc(void)
{
	return rte_rdtsc();
}

void ferrule_pause(void)
{
	rte_pause();
}

void ferrule_prefetch0(const void *p)
{
	rte_prefetch0(p);
}

int ferrule_lpm_lookup(const struct rte_lpm *lpm, uint32_t ip, uint32_t *next_hop)
{
	return rte_lpm_lookup(lpm, ip, next_hop);
}

int ferrule_lpm_lookup_bulk(const struct rte_lpm *lpm, const uint32_t *ips,
                            uint32_t *next_hops, unsigned int n)
{
	return rte_lpm_lookup_bulk(lpm, ips, next_hops, n);
}
