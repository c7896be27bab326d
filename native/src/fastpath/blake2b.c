/* BLAKE2b as specified in RFC 7693 (sections 2 and 3), unkeyed and with no salt or
 * personalisation: what hashlib.blake2b(data, digest_size=n) computes. Written for short
 * inputs (argument digests). */
#include "blake2b.h"

#include <stdint.h>
#include <string.h>

static const uint64_t IV[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
    0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL,
};

/* The message schedule: round r uses SIGMA[r % 10]. */
static const uint8_t SIGMA[10][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
};

typedef struct {
  uint64_t h[8];
  uint64_t counter; /* bytes compressed so far (inputs here are far below 2^64) */
  unsigned char block[128];
  size_t filled;
} State;

static uint64_t rotr(uint64_t x, unsigned n) { return (x >> n) | (x << (64 - n)); }

static uint64_t load64(const unsigned char* p) {
  uint64_t v;
  memcpy(&v, p, sizeof v); /* little-endian hosts only (x86-64, aarch64) */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

#define MIX(a, b, c, d, x, y)     \
  do {                            \
    v[a] = v[a] + v[b] + (x);     \
    v[d] = rotr(v[d] ^ v[a], 32); \
    v[c] = v[c] + v[d];           \
    v[b] = rotr(v[b] ^ v[c], 24); \
    v[a] = v[a] + v[b] + (y);     \
    v[d] = rotr(v[d] ^ v[a], 16); \
    v[c] = v[c] + v[d];           \
    v[b] = rotr(v[b] ^ v[c], 63); \
  } while (0)

static void compress(State* s, int last) {
  uint64_t v[16], m[16];
  for (int i = 0; i < 8; i++) {
    v[i] = s->h[i];
    v[i + 8] = IV[i];
  }
  v[12] ^= s->counter;
  if (last) v[14] = ~v[14];
  for (int i = 0; i < 16; i++) m[i] = load64(s->block + 8 * i);
    /* Unrolled with constant round numbers, so the schedule's indices fold away and v stays
     * in registers: an argument digest is one or two compressions on the application's
     * thread, for every call whose key is new. */
#define ROUND(r)                                         \
  do {                                                   \
    MIX(0, 4, 8, 12, m[SIGMA[r][0]], m[SIGMA[r][1]]);    \
    MIX(1, 5, 9, 13, m[SIGMA[r][2]], m[SIGMA[r][3]]);    \
    MIX(2, 6, 10, 14, m[SIGMA[r][4]], m[SIGMA[r][5]]);   \
    MIX(3, 7, 11, 15, m[SIGMA[r][6]], m[SIGMA[r][7]]);   \
    MIX(0, 5, 10, 15, m[SIGMA[r][8]], m[SIGMA[r][9]]);   \
    MIX(1, 6, 11, 12, m[SIGMA[r][10]], m[SIGMA[r][11]]); \
    MIX(2, 7, 8, 13, m[SIGMA[r][12]], m[SIGMA[r][13]]);  \
    MIX(3, 4, 9, 14, m[SIGMA[r][14]], m[SIGMA[r][15]]);  \
  } while (0)
  ROUND(0);
  ROUND(1);
  ROUND(2);
  ROUND(3);
  ROUND(4);
  ROUND(5);
  ROUND(6);
  ROUND(7);
  ROUND(8);
  ROUND(9);
  ROUND(0); /* rounds 10 and 11 reuse the first two schedules */
  ROUND(1);
#undef ROUND
  for (int i = 0; i < 8; i++) s->h[i] ^= v[i] ^ v[i + 8];
}

static void update(State* s, const unsigned char* data, size_t n) {
  while (n > 0) {
    /* The last block is compressed only in final(), with the last-block flag. */
    if (s->filled == sizeof s->block) {
      s->counter += sizeof s->block;
      compress(s, 0);
      s->filled = 0;
    }
    size_t take = sizeof s->block - s->filled;
    if (take > n) take = n;
    memcpy(s->block + s->filled, data, take);
    s->filled += take;
    data += take;
    n -= take;
  }
}

void blake2b_digest(unsigned char* out, size_t outlen, const unsigned char* a, size_t alen,
                    const unsigned char* b, size_t blen) {
  State s;
  memcpy(s.h, IV, sizeof s.h);
  s.h[0] ^= 0x01010000ULL ^ (uint64_t)outlen; /* depth 1, fanout 1, no key */
  s.counter = 0;
  s.filled = 0;
  if (alen) update(&s, a, alen);
  if (blen) update(&s, b, blen);
  s.counter += s.filled;
  memset(s.block + s.filled, 0, sizeof s.block - s.filled);
  compress(&s, 1);
  unsigned char full[64];
  for (int i = 0; i < 8; i++)
    for (int j = 0; j < 8; j++) full[8 * i + j] = (unsigned char)(s.h[i] >> (8 * j));
  memcpy(out, full, outlen);
}
