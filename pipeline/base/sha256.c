/* SHA-256 through OpenSSL's EVP interface (a maintained implementation; we never hand-roll the hash). */
#include "pipeline/base/sha256.h"

#include "pipeline/base/atomic_file.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>

#include "pipeline/base/log.h"

struct Sha256 {
    EVP_MD_CTX *ctx;
};

Sha256 *sha256_new(void) {
    Sha256 *s = xmalloc(sizeof *s);
    s->ctx = EVP_MD_CTX_new();
    CHECK_ALLOC(s->ctx);
    if (EVP_DigestInit_ex(s->ctx, EVP_sha256(), NULL) != 1) die("EVP_DigestInit_ex(sha256) failed");
    return s;
}

void sha256_update(Sha256 *s, const void *data, size_t n) {
    if (n == 0) return;
    if (EVP_DigestUpdate(s->ctx, data, n) != 1) die("EVP_DigestUpdate failed");
}

void sha256_final_hex(Sha256 *s, char hex[65]) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(s->ctx, md, &len) != 1 || len != 32) die("EVP_DigestFinal_ex failed");
    static const char digits[] = "0123456789abcdef";
    for (unsigned i = 0; i < 32; i++) {
        hex[2 * i] = digits[md[i] >> 4];
        hex[2 * i + 1] = digits[md[i] & 15];
    }
    hex[64] = '\0';
    EVP_MD_CTX_free(s->ctx);
    free(s);
}

void sha256_hex(const void *data, size_t n, char hex[65]) {
    Sha256 *s = sha256_new();
    sha256_update(s, data, n);
    sha256_final_hex(s, hex);
}

int sha256_file_hex(const char *path, char hex[65], char *err, size_t errlen) {
    char open_err[512];
    FILE *fp = fopen_regular_read(path, open_err, sizeof open_err);
    if (!fp) {
        if (err && errlen) snprintf(err, errlen, "%s", open_err);
        return -1;
    }
    Sha256 *s = sha256_new();
    static _Thread_local unsigned char buf[1 << 16];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, fp)) > 0) sha256_update(s, buf, got);
    int bad = ferror(fp);
    int e = errno;
    fclose(fp);
    sha256_final_hex(s, hex);
    if (bad) {
        if (err && errlen) snprintf(err, errlen, "%s: read failed: %s", path, strerror(e));
        hex[0] = '\0';
        return -1;
    }
    return 0;
}
