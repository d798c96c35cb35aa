/* Free-space checks (see disk_space.h). */
#include "datasets/disk_space.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>

#include "pipeline/base/log.h"

int64_t disk_space_available(const char *dir, char *err, size_t errlen) {
    struct statvfs sv;
    if (statvfs(dir, &sv) != 0) {
        set_err(err, errlen, "%s: cannot ask for free space: %s", dir, strerror(errno));
        return -1;
    }
    /* f_bavail: blocks available to an unprivileged writer, in units of f_frsize */
    const unsigned long long bytes = (unsigned long long)sv.f_bavail * (unsigned long long)sv.f_frsize;
    return bytes > (unsigned long long)INT64_MAX ? INT64_MAX : (int64_t)bytes;
}

int disk_space_require(const char *dir, int64_t need, const char *what, char *err, size_t errlen) {
    if (need <= 0) return 0;
    const int64_t have = disk_space_available(dir, err, errlen);
    if (have < 0) return -1;
    const int64_t want = need > INT64_MAX - DISK_SPACE_MARGIN_BYTES ? INT64_MAX : need + DISK_SPACE_MARGIN_BYTES;
    if (have < want) {
        set_err(err, errlen, "%s: not enough free space for %s: it needs %" PRId64 " bytes plus a margin of %lld MiB, "
                             "the file system has %" PRId64 " bytes available",
                dir, what, need, DISK_SPACE_MARGIN_BYTES >> 20, have);
        return -1;
    }
    return 0;
}
