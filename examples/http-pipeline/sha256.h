/* SHA-256 (FIPS 180-4), small and dependency-free: the CPU work that the
 * http-pipeline example does for each request. */

#ifndef HTTP_PIPELINE_SHA256_H
#define HTTP_PIPELINE_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_DIGEST_SIZE 32

typedef struct sha256_s {
  uint32_t state[8];
  uint64_t bytes;
  unsigned char block[64];
  size_t used;
} sha256_t;

void sha256_init(sha256_t* ctx);
void sha256_update(sha256_t* ctx, const void* data, size_t len);
void sha256_final(sha256_t* ctx, unsigned char out[SHA256_DIGEST_SIZE]);

/* out = SHA-256(data), then `rounds` times out = SHA-256(out). */
void sha256_iterate(const void* data,
                    size_t len,
                    uint64_t rounds,
                    unsigned char out[SHA256_DIGEST_SIZE]);

#endif /* HTTP_PIPELINE_SHA256_H */
