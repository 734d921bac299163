/*
 * A disk whose syncs fail, for the store's tests (tests/test_store_durability.py):
 * while the file named by FAILING_FSYNC_FLAG exists, each fsync() and fdatasync() of
 * the process fails with EIO (as a dying disk or a lost network block device makes it),
 * without calling the real one. Otherwise both sync for real. Loaded with LD_PRELOAD by
 * the test, built with gcc; never shipped.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

static int failing(void) {
    const char *flag = getenv("FAILING_FSYNC_FLAG");
    return flag != NULL && access(flag, F_OK) == 0;
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    if (failing()) {
        errno = EIO;
        return -1;
    }
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    if (failing()) {
        errno = EIO;
        return -1;
    }
    return real(fd);
}
