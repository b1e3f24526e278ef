/*
 * pagewalk: whether random accesses on this machine pay for address translation even
 * on transparent huge pages — i.e. whether the host backs this guest's memory with
 * 4 KiB pages, so that every TLB entry covers 4 KiB whatever the guest's page size.
 *
 * A dependent pointer chase over lines placed LINES_PER_PAGE to a 4 KiB page across a
 * SPAN-MiB, 2 MiB-aligned region on transparent huge pages (lines at a different
 * offset in each page, so that all cache sets are used). Keep the lines few enough
 * for the L2 (512 KiB here) so that only their addresses differ between the runs, not
 * where they are cached (this guest's share of the L3 changes with its neighbours):
 * packed, they cost an L2 hit; one per 4 KiB page over 32 MiB, they cost the same
 * unless translation does — with the host's pages as large as the guest's, 32 MiB of
 * huge pages is 16 TLB entries. Thread CPU time.
 *
 *   gcc -O2 -o pagewalk perf/memfloor/pagewalk.c
 *   ./pagewalk 1 32      # 512 KiB of lines, packed
 *   ./pagewalk 32 1      # the same 512 KiB of lines, one per 4 KiB page over 32 MiB
 *   ./pagewalk 32 1 0    # ... on the guest's 4 KiB pages
 *
 * Arguments: SPAN_MiB LINES_PER_PAGE [HUGE=1]. Prints ns per access.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static uint64_t rng = 88172645463325252ULL;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s SPAN_MiB LINES_PER_PAGE [HUGE=1]\n", argv[0]);
        return 2;
    }
    size_t span = strtoul(argv[1], NULL, 10) << 20;
    size_t per_page = strtoul(argv[2], NULL, 10);
    int huge = argc > 3 ? atoi(argv[3]) : 1;
    if (span < 4096 || per_page < 1 || per_page > 64) {
        fprintf(stderr, "SPAN_MiB >= 1, 1 <= LINES_PER_PAGE <= 64\n");
        return 2;
    }
    size_t align = 2 << 20;
    char *raw = mmap(NULL, span + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    char *p = (char *)(((uintptr_t)raw + align - 1) & ~(align - 1));
    madvise(p, span, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    memset(p, 0, span);
    size_t pages = span / 4096, n = pages * per_page;
    uint64_t *off = malloc(n * sizeof *off);
    if (!off) {
        perror("malloc");
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        size_t page = i / per_page;
        off[i] = page * 4096 + ((i % per_page + page * 7) % 64) * 64;
    }
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = next() % (i + 1);
        uint64_t t = off[i];
        off[i] = off[j];
        off[j] = t;
    }
    for (size_t i = 0; i < n; i++)
        *(uint64_t *)(p + off[i]) = off[(i + 1) % n];
    size_t steps = 3000000;
    uint64_t x = off[0];
    double t0 = cpu_now();
    for (size_t i = 0; i < steps; i++)
        x = *(uint64_t *)(p + x);
    double ns = (cpu_now() - t0) / steps * 1e9;
    /* How much of the guest's memory really is on huge pages (else the spread case
     * measures the guest's own 4 KiB pages, not the host's). */
    size_t anon_huge_kb = 0;
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "AnonHugePages: %zu kB", &anon_huge_kb) == 1)
                break;
        fclose(f);
    }
    printf("span %zu MiB, %zu lines per 4 KiB page (%zu KiB of lines), huge pages %s "
           "(%zu of %zu MiB): %.1f ns per access%s\n",
           span >> 20, per_page, n * 64 >> 10, huge ? "on" : "off", anon_huge_kb >> 10,
           span >> 20, ns, x == 1 ? " " : "");
    return 0;
}
