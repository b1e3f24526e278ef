/* ferrule-ffi shim: the DPDK headers bindgen reads, plus exported wrappers for the
 * `static inline` functions Ferrule calls (bindgen cannot link to an inline). */
#ifndef FERRULE_SHIM_H
#define FERRULE_SHIM_H

#include <stdint.h>
#include <rte_common.h>
#include <rte_errno.h>
#include <rte_eal.h>
#include <rte_lcore.h>
#include <rte_launch.h>
#include <rte_cycles.h>
#include <rte_memory.h>
#include <rte_malloc.h>
#include <rte_mempool.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <rte_ethdev.h>
#include <rte_bus_vdev.h>
#include <rte_dev.h>
#include <rte_eth_ring.h>
#include <rte_version.h>
#include <rte_log.h>

/* ethdev fast path */
uint16_t ferrule_eth_rx_burst(uint16_t port_id, uint16_t queue_id,
                              struct rte_mbuf **rx_pkts, uint16_t nb_pkts);
uint16_t ferrule_eth_tx_burst(uint16_t port_id, uint16_t queue_id,
                              struct rte_mbuf **tx_pkts, uint16_t nb_pkts);

/* mbufs */
struct rte_mbuf *ferrule_pktmbuf_alloc(struct rte_mempool *mp);
int ferrule_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs,
                               unsigned int count);
void ferrule_pktmbuf_free(struct rte_mbuf *m);
void ferrule_pktmbuf_free_bulk(struct rte_mbuf **mbufs, unsigned int count);
void *ferrule_pktmbuf_data(const struct rte_mbuf *m);
uint16_t ferrule_pktmbuf_data_len(const struct rte_mbuf *m);
uint32_t ferrule_pktmbuf_pkt_len(const struct rte_mbuf *m);
uint16_t ferrule_pktmbuf_nb_segs(const struct rte_mbuf *m);
uint16_t ferrule_pktmbuf_headroom(const struct rte_mbuf *m);
uint16_t ferrule_pktmbuf_tailroom(const struct rte_mbuf *m);
/* Appends len bytes to a single-segment mbuf; NULL when the tailroom is too small. */
char *ferrule_pktmbuf_append(struct rte_mbuf *m, uint16_t len);
/* Removes len bytes from the end; -1 when the mbuf is shorter. */
int ferrule_pktmbuf_trim(struct rte_mbuf *m, uint16_t len);
/* Prepends len bytes of headroom; NULL when the headroom is too small. */
char *ferrule_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len);
/* Removes len bytes from the front; NULL when the first segment is shorter. */
char *ferrule_pktmbuf_adj(struct rte_mbuf *m, uint16_t len);
uint16_t ferrule_mbuf_port(const struct rte_mbuf *m);

/* rings (handoff between workers, tests) */
unsigned int ferrule_ring_enqueue_burst(struct rte_ring *r, void *const *objs,
                                        unsigned int n);
unsigned int ferrule_ring_dequeue_burst(struct rte_ring *r, void **objs,
                                        unsigned int n);
unsigned int ferrule_ring_count(const struct rte_ring *r);

/* misc */
int ferrule_errno(void);
unsigned int ferrule_lcore_id(void);
uint64_t ferrule_rdtsc(void);
void ferrule_pause(void);
void ferrule_prefetch0(const void *p);

/* LPM: DPDK's IPv4 route table, the baseline the benchmarks compare Ferrule's with. */
#include <rte_lpm.h>

/* rte_lpm_lookup: 0 and *next_hop on a hit, -ENOENT on a miss. */
int ferrule_lpm_lookup(const struct rte_lpm *lpm, uint32_t ip, uint32_t *next_hop);
/* rte_lpm_lookup_bulk: next_hops[i] is the raw entry, RTE_LPM_LOOKUP_SUCCESS set on a hit. */
int ferrule_lpm_lookup_bulk(const struct rte_lpm *lpm, const uint32_t *ips,
                            uint32_t *next_hops, unsigned int n);

#endif
