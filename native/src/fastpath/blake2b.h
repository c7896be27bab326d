/* BLAKE2b (RFC 7693), unkeyed, for the recorder's argument digests. */
#pragma once

#include <stddef.h>

/* out = BLAKE2b-(8 * outlen)(a || b); outlen is 1 to 64. Either part may be empty (NULL, 0). */
void blake2b_digest(unsigned char* out, size_t outlen, const unsigned char* a, size_t alen,
                    const unsigned char* b, size_t blen);
