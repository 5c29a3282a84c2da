package io.changelake.spark;

import java.util.Arrays;

/**
 * A set of row positions of one data file (a deletion vector, or the rows to keep), in the form
 * a row tests cheapest: a bitmap, or, when the positions are few and far apart (a bitmap would be
 * much larger than they are), the sorted positions.
 */
final class Positions {
  private static final long BITMAP = 0;
  private static final long SORTED = 1;

  private Positions() {}

  /**
   * The set of {@code values[1..n]} (which this sorts in place) as one array: word 0 says which
   * form follows (a bitmap, or the sorted positions).
   */
  static long[] of(long[] values, int n) {
    Arrays.sort(values, 1, n + 1);
    long words = n == 0 ? 0 : (values[n] >>> 6) + 1;
    if (words > 4L * n + 1024) {
      values[0] = SORTED;
      return values;
    }
    long[] bitmap = new long[(int) words + 1];
    bitmap[0] = BITMAP;
    for (int i = 1; i <= n; i++) {
      long p = values[i];
      bitmap[1 + (int) (p >>> 6)] |= 1L << (p & 63);
    }
    return bitmap;
  }

  static boolean contains(long[] set, long p) {
    if (p < 0) {
      return false;
    }
    if (set[0] == SORTED) {
      return Arrays.binarySearch(set, 1, set.length, p) >= 0;
    }
    long word = 1 + (p >>> 6);
    return word < set.length && (set[(int) word] & (1L << (p & 63))) != 0;
  }
}
