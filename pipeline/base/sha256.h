/* SHA-256 through OpenSSL's libcrypto (EVP). Hex digests are 64 lowercase chars + NUL. */
#ifndef PIPELINE_SHA256_H
#define PIPELINE_SHA256_H

#include <stddef.h>

typedef struct Sha256 Sha256;
Sha256 *sha256_new(void);
void sha256_update(Sha256 *s, const void *data, size_t n);
void sha256_final_hex(Sha256 *s, char hex[65]); /* frees s */
void sha256_hex(const void *data, size_t n, char hex[65]);
int sha256_file_hex(const char *path, char hex[65], char *err, size_t errlen);

#endif
