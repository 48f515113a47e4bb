package io.ozoners.hadoop.fs;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * CRC combine for the reflected CRCs with all-ones init and final xor
 * (CRC32C, CRC32): {@code crc(A || B) = shift_|B|(crc(A)) ^ crc(B)}, where
 * {@code shift_n} multiplies by x^(8n) modulo the polynomial. For a fixed
 * window length the shift is a linear map on 32 bits, applied as four
 * byte-indexed tables, so the expected CRC of a run of whole windows costs a
 * few table lookups per window. One CRC over the run's bytes then checks
 * every window in it at once.
 */
final class CrcCombine {
  /** Reflected CRC32C (Castagnoli) polynomial. */
  static final int CRC32C = 0x82F63B78;
  /** Reflected CRC32 (IEEE) polynomial. */
  static final int CRC32 = 0xEDB88320;

  private static final Map<Long, CrcCombine> CACHE = new ConcurrentHashMap<>();

  private final int poly;
  private final int[] t0 = new int[256];
  private final int[] t1 = new int[256];
  private final int[] t2 = new int[256];
  private final int[] t3 = new int[256];

  private CrcCombine(int poly, long len) {
    this.poly = poly;
    int xp = xpow(poly, 8 * len);
    for (int b = 0; b < 256; b++) {
      t0[b] = multmodp(poly, xp, b);
      t1[b] = multmodp(poly, xp, b << 8);
      t2[b] = multmodp(poly, xp, b << 16);
      t3[b] = multmodp(poly, xp, b << 24);
    }
  }

  /** The shift by {@code len} bytes for {@code poly} (cached). */
  static CrcCombine of(int poly, long len) {
    return CACHE.computeIfAbsent(((long) poly << 32) ^ len, k -> new CrcCombine(poly, len));
  }

  /** {@code crc} shifted by this table's length: the first part of a combine. */
  int shift(int crc) {
    return t0[crc & 0xff] ^ t1[(crc >>> 8) & 0xff] ^ t2[(crc >>> 16) & 0xff] ^ t3[crc >>> 24];
  }

  /** crc(A || B) from crc(A), crc(B) and |B|, for any length (slow path: a short last window). */
  static int combine(int poly, int crcA, int crcB, long lenB) {
    return multmodp(poly, xpow(poly, 8 * lenB), crcA) ^ crcB;
  }

  /** a * b modulo the polynomial, reflected representation (bit 31 is x^0). */
  static int multmodp(int poly, int a, int b) {
    int m = 1 << 31;
    int p = 0;
    for (;;) {
      if ((a & m) != 0) {
        p ^= b;
        if ((a & (m - 1)) == 0) {
          break;
        }
      }
      m >>>= 1;
      if (m == 0) {
        break;
      }
      b = (b & 1) != 0 ? (b >>> 1) ^ poly : b >>> 1;
    }
    return p;
  }

  /** x^n modulo the polynomial, reflected. */
  static int xpow(int poly, long n) {
    int result = 1 << 31; // x^0
    int sq = 1 << 30; // x^1
    while (n != 0) {
      if ((n & 1) != 0) {
        result = multmodp(poly, sq, result);
      }
      sq = multmodp(poly, sq, sq);
      n >>>= 1;
    }
    return result;
  }
}
