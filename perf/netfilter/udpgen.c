/* udpgen: a UDP flood over one unconnected socket with sendmmsg, for the netfilter
 * conntrack comparison (perf/netfilter-conntrack.sh). Each datagram goes to one of
 * `flows` destinations (198.18.0.0/15 addresses x ports 1024..), in order, so the
 * 5-tuples repeat every `flows` packets; with `flows` 0 every datagram is a new tuple.
 * Prints the datagrams sent and the rate, over `seconds` or `max` datagrams, whichever
 * ends first, and the time per datagram in wall time and in the process's CPU time.
 *
 * usage: udpgen <flows> <seconds> <max> <warm>   (warm 1: each flow sent once first,
 * untimed)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64
#define PORTS 60000u

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* CPU time of the process (user + system: on veth the receive path runs in softirqs
 * on this CPU, charged to it by the tick). */
static double cpu(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static void dest(struct sockaddr_in *a, unsigned long i) {
    memset(a, 0, sizeof *a);
    a->sin_family = AF_INET;
    a->sin_port = htons(1024 + i % PORTS);
    a->sin_addr.s_addr = htonl((198u << 24 | 18u << 16) + 1 + (unsigned)(i / PORTS));
}

/* Sends datagrams first .. first + n - 1 (mod flows unless flows is 0). */
static unsigned long blast(int fd, unsigned long flows, unsigned long first, unsigned long n,
                           double until) {
    static char payload[18];
    struct sockaddr_in addr[BATCH];
    struct iovec iov[BATCH];
    struct mmsghdr msg[BATCH];
    unsigned long sent = 0, i = first;
    while (sent < n && (until == 0 || (sent % 4096 != 0 || now() < until))) {
        int k;
        for (k = 0; k < BATCH; k++, i++) {
            dest(&addr[k], flows ? i % flows : i);
            iov[k].iov_base = payload;
            iov[k].iov_len = sizeof payload;
            memset(&msg[k], 0, sizeof msg[k]);
            msg[k].msg_hdr.msg_name = &addr[k];
            msg[k].msg_hdr.msg_namelen = sizeof addr[k];
            msg[k].msg_hdr.msg_iov = &iov[k];
            msg[k].msg_hdr.msg_iovlen = 1;
        }
        int r = sendmmsg(fd, msg, BATCH, 0);
        if (r < 0) {
            perror("sendmmsg");
            exit(1);
        }
        sent += (unsigned long)r;
    }
    return sent;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: udpgen <flows> <seconds> <max> <warm>\n");
        return 2;
    }
    unsigned long flows = strtoul(argv[1], 0, 10);
    double seconds = atof(argv[2]);
    unsigned long max = strtoul(argv[3], 0, 10);
    int warm = atoi(argv[4]);
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0) {
        perror("socket");
        return 1;
    }
    if (warm && flows)
        blast(fd, flows, 0, flows, 0);
    double t0 = now(), c0 = cpu();
    unsigned long sent = blast(fd, flows, 0, max, t0 + seconds);
    double t = now() - t0, c = cpu() - c0;
    printf("sent %lu in %.3f s: %.3f Mpps, %.1f ns per datagram wall, %.1f ns CPU\n", sent, t,
           sent / t / 1e6, t * 1e9 / sent, c * 1e9 / sent);
    return 0;
}
