/*
 * A slower disk for the test suite (issue 19, target 1): each fsync() and
 * fdatasync() of the process, and of every process it starts, waits
 * SLOW_FSYNC_EXTRA_US microseconds (default 100) after the real call returns.
 * The data is still synced for real; only the wait is added, so a commit that
 * costs 200 us on this machine's disk costs about 300 us, the "slow disk" the
 * issue names. Loaded with LD_PRELOAD by tools/slow_disk.sh; never shipped.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

static long extra_ns(void) {
    static long ns = -1;
    if (ns < 0) {
        const char *v = getenv("SLOW_FSYNC_EXTRA_US");
        ns = v ? atol(v) * 1000L : 100000L;
    }
    return ns;
}

static void wait_extra(void) {
    struct timespec left = {extra_ns() / 1000000000L, extra_ns() % 1000000000L};
    while (nanosleep(&left, &left) != 0) {
    }
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    int r = real(fd);
    wait_extra();
    return r;
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    int r = real(fd);
    wait_extra();
    return r;
}
