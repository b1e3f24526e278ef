/*
 * memfloor: what the connection table's memory pattern alone costs on this machine.
 *
 * Per "packet": one random 64-byte index bucket (one per four connections) and one
 * random 112-byte entry (read, two bytes written), as the conntrack lookup touches
 * them, plus a dependent chain of WORK multiply-adds standing in for the rest of the
 * packet's processing. Bursts of 32; the bucket and entry lines are prefetched either
 * all at once per burst ("burst") or a few packets ahead ("pipelined": bucket BA
 * ahead, entry EA ahead), as ConnTable::prefetch_ahead does. A third layout,
 * "one page", puts each entry in the 4 KiB page of its bucket (8 buckets and 32
 * entries per page, the same 128 bytes per connection), pipelined: what a table
 * co-locating entries with their original tuple's bucket would cost. Thread CPU time.
 *
 *   gcc -O2 -o memfloor perf/memfloor/memfloor.c
 *   gcc -O2 -DENTRY=64 -o memfloor64 perf/memfloor/memfloor.c   (one-line entries)
 *   ./memfloor [CONNS=1048576] [WORK=30] [HUGE=1] [BA=8] [EA=4] [WIDE=0]
 *
 * HUGE: 0 the guest's 4 KiB pages, 1 transparent huge pages (2 MiB), 2 one 1 GiB
 * hugetlbfs page for everything (reserve it first:
 * `echo 1 > /sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages`, and give it
 * back with 0 afterwards). WIDE=1 makes the work six independent add chains per step
 * instead of one multiply chain: about the stages' instructions per cycle, so that
 * the reorder buffer covers as little time as it does for the real code.
 *
 * Prints ns per packet for 1,024 connections (everything cached) and for CONNS, for
 * each scheme. No packets, no network: memory only.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define BURST 32
/* Entry size in bytes: 112 as in the table; -DENTRY=64 for a one-line entry. */
#ifndef ENTRY
#define ENTRY 112
#endif
#define PACKETS 10000000UL

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static uint64_t rng = 88172645463325252ULL;
static inline uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* HUGE=2: one 1 GiB page, handed out from the start again by each run. */
#define GIB (1UL << 30)
static char *gib;
static size_t gib_used;

static char *alloc(size_t size, int huge) {
    if (huge == 2) {
        if (!gib) {
            gib = mmap(NULL, GIB, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | (30 << MAP_HUGE_SHIFT), -1, 0);
            if (gib == MAP_FAILED) {
                perror("mmap of a 1 GiB page (is one reserved?)");
                exit(1);
            }
        }
        if (gib_used + size > GIB) {
            fprintf(stderr, "more than 1 GiB asked for\n");
            exit(1);
        }
        char *p = gib + gib_used;
        gib_used += (size + 4095) & ~4095UL;
        memset(p, 1, size);
        return p;
    }
    char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    madvise(p, size, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    memset(p, 1, size);
    return p;
}

static inline void prefetch_entry(char *e) {
    __builtin_prefetch(e);
    __builtin_prefetch(e + 63);
    __builtin_prefetch(e + ENTRY - 1);
}

static int wide;

static inline uint64_t work_on(char *e, uint64_t acc, int work) {
    uint64_t x = (uint64_t)e[0] + acc;
    if (wide) {
        uint64_t y = acc + 1, z = acc + 2, u = acc + 3, v = acc + 5, q = acc + 7;
        for (int w = 0; w < work; w++) {
            x += y ^ 3;
            y += z ^ 5;
            z += u ^ 9;
            u += v ^ 17;
            v += q ^ 33;
            q += w;
            __asm__ volatile("" : "+r"(x), "+r"(y), "+r"(z), "+r"(u), "+r"(v), "+r"(q));
        }
        x ^= y ^ z ^ u ^ v ^ q;
    } else {
        for (int w = 0; w < work; w++) {
            x = x * 0x9E3779B97F4A7C15ULL + (x >> 7);
            __asm__ volatile("" : "+r"(x));
        }
    }
    e[ENTRY * 5 / 8]++;
    e[ENTRY - 12]++;
    return x;
}

/* pipelined: 0 burst, 1 pipelined, 2 one page (pipelined) */
static double run(size_t conns, int work, int huge, int pipelined, int ba, int ea) {
    size_t buckets = conns / 4 > 0 ? conns / 4 : 1;
    size_t pages = conns / 32 > 0 ? conns / 32 : 1;
    int one_page = pipelined == 2;
    char *b = alloc(one_page ? pages * 4096 : buckets * 64, huge);
    char *e = one_page ? b : alloc(conns * ENTRY, huge);
    uint64_t bi[BURST], ei[BURST], acc = 0;
    double t0 = cpu_now();
    for (size_t p = 0; p < PACKETS; p += BURST) {
        for (int j = 0; j < BURST; j++) {
            uint64_t r = next();
            if (one_page) {
                uint64_t page = (r % pages) * 4096;
                bi[j] = page + ((r >> 32) % 8) * 64;
                ei[j] = page + 512 + ((r >> 40) % 32) * ENTRY;
            } else {
                bi[j] = (r % buckets) * 64;
                ei[j] = ((r >> 32) % conns) * ENTRY;
            }
        }
        if (!pipelined) {
            for (int j = 0; j < BURST; j++)
                __builtin_prefetch(b + bi[j]);
            for (int j = 0; j < BURST; j++) {
                acc += b[bi[j]];
                prefetch_entry(e + ei[j]);
            }
            for (int j = 0; j < BURST; j++)
                acc += work_on(e + ei[j], acc, work);
        } else {
            for (int j = 0; j < ba && j < BURST; j++)
                __builtin_prefetch(b + bi[j]);
            for (int j = 0; j < ea && j < BURST; j++) {
                acc += b[bi[j]];
                prefetch_entry(e + ei[j]);
            }
            for (int j = 0; j < BURST; j++) {
                if (j + ba < BURST)
                    __builtin_prefetch(b + bi[j + ba]);
                if (j + ea < BURST) {
                    acc += b[bi[j + ea]];
                    prefetch_entry(e + ei[j + ea]);
                }
                acc += work_on(e + ei[j], acc, work);
            }
        }
    }
    double ns = (cpu_now() - t0) / PACKETS * 1e9;
    if (huge == 2) {
        gib_used = 0;
    } else if (one_page) {
        munmap(b, pages * 4096);
    } else {
        munmap(b, buckets * 64);
        munmap(e, conns * ENTRY);
    }
    if (acc == 42)
        puts("");
    return ns;
}

int main(int argc, char **argv) {
    size_t conns = argc > 1 ? strtoul(argv[1], NULL, 10) : 1048576;
    int work = argc > 2 ? atoi(argv[2]) : 30;
    int huge = argc > 3 ? atoi(argv[3]) : 1;
    int ba = argc > 4 ? atoi(argv[4]) : 8;
    int ea = argc > 5 ? atoi(argv[5]) : 4;
    wide = argc > 6 ? atoi(argv[6]) : 0;
    static const char *pages_names[] = {"4 KiB pages", "transparent huge pages", "a 1 GiB page"};
    if (huge < 0 || huge > 2) {
        fprintf(stderr, "HUGE: 0, 1 or 2\n");
        return 2;
    }
    printf("conns %zu, work %d (%s), %s, pipelined bucket %d / entry %d ahead\n", conns, work,
           wide ? "six add chains" : "one multiply chain", pages_names[huge], ba, ea);
    static const char *names[] = {"burst", "pipelined", "one page"};
    for (int pipelined = 0; pipelined < 3; pipelined++) {
        double small = run(1024, work, huge, pipelined, ba, ea);
        double big = run(conns, work, huge, pipelined, ba, ea);
        printf("%-9s  1,024: %6.1f ns/packet   %zu: %6.1f ns/packet   (%+.0f%% time, rate %.2f)\n",
               names[pipelined], small, conns, big, (big / small - 1) * 100,
               small / big);
    }
    return 0;
}
