package io.changelake.spark;

import java.lang.reflect.Field;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Arrays;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.Proxy;
import java.util.List;
import java.util.PrimitiveIterator;
import org.apache.parquet.column.page.PageReadStore;
import org.apache.parquet.hadoop.ParquetFileReader;
import org.apache.parquet.hadoop.metadata.BlockMetaData;
import org.apache.parquet.hadoop.metadata.ColumnChunkMetaData;
import org.apache.parquet.internal.column.columnindex.ColumnIndex;
import org.apache.parquet.internal.column.columnindex.OffsetIndex;
import org.apache.parquet.internal.filter2.columnindex.RowRanges;

/**
 * Late materialization: a read of one file that decodes only the rows at given positions (phase
 * 2 of a row-level write, which knows its matched positions). Spark's vectorized reader already
 * skips the rows outside a row group's row ranges without decoding them and reads only the pages
 * that hold some (its column-index filtering, with the page index); here the ranges are the
 * positions themselves, handed to it in place of those a filter would compute.
 *
 * <p>Spark builds its reader inside {@code ParquetFileFormat}; this reaches into the reader it
 * built for a file (its row-group source and row count, fields Spark does not expose) before
 * the first batch is read. Where anything is not as expected (another reader, a file without a
 * page index) the file is read whole, and the reader's selection keeps the positions: slower,
 * never different.
 */
public final class Late {
  private static final java.util.concurrent.atomic.AtomicLong RESTRICTED =
      new java.util.concurrent.atomic.AtomicLong();
  private static final String BASE =
      "org.apache.spark.sql.execution.datasources.parquet.SpecificParquetRecordReaderBase";

  private Late() {}

  /** How many file reads this JVM has restricted to positions so far (what tests count). */
  public static long restrictedFiles() {
    return RESTRICTED.get();
  }

  /**
   * Make {@code rows}, Spark's iterator over one file not yet read, return only the rows at the
   * sorted positions {@code sorted[1..n]}; false if it cannot (then it is unchanged).
   */
  static boolean restrict(Object rows, long[] sorted, int n) {
    return restrictBy(rows, (file, groups) -> positionRanges(groups, sorted, n));
  }

  /**
   * Make {@code rows}, Spark's iterator over one file not yet read, return only the rows of the
   * pages whose INT64 column {@code column} may hold one of the sorted keys {@code
   * sorted[1..n]} (by the page index's minimum and maximum of each page: a file sorted by that
   * column has few such pages per key); false if it cannot (then it is unchanged). The rows
   * returned still need the caller's own test of the key.
   */
  static boolean restrictToKeys(Object rows, long[] sorted, int n, String column) {
    return restrictBy(rows, (file, groups) -> keyRanges(file, groups, sorted, n, column));
  }

  /** The row ranges to read per row group (null: none of the group), or null if unknown. */
  private interface Ranges {
    RowRanges[] of(ParquetFileReader file, List<BlockMetaData> groups) throws java.io.IOException;
  }

  private static boolean restrictBy(Object rows, Ranges chosen) {
    try {
      Object reader = field(rows.getClass(), "rowReader").get(rows);
      Class<?> base = Class.forName(BASE, false, reader.getClass().getClassLoader());
      if (!base.isInstance(reader)) {
        return false;
      }
      Field source = field(base, "reader");
      Object current = source.get(reader);
      ParquetFileReader file = (ParquetFileReader) field(current.getClass(), "reader").get(current);
      // Without column-index filtering the file reader would read row groups whole.
      Object options = field(ParquetFileReader.class, "options").get(file);
      if (!((org.apache.parquet.ParquetReadOptions) options).useColumnIndexFilter()) {
        return false;
      }
      RowRanges[] ranges = chosen.of(file, file.getRowGroups());
      if (ranges == null) {
        return false;
      }
      long total = 0;
      for (RowRanges r : ranges) {
        total += r == null ? 0 : r.rowCount();
      }
      Class<?> api = source.getType();
      InvocationHandler handler = new InvocationHandler() {
        private int next;

        @Override
        public Object invoke(Object proxy, java.lang.reflect.Method method, Object[] args)
            throws Throwable {
          switch (method.getName()) {
            case "readNextRowGroup":
              while (next < ranges.length && ranges[next] == null) {
                next++;
              }
              if (next == ranges.length) {
                return null;
              }
              PageReadStore pages = file.readFilteredRowGroup(next, ranges[next]);
              if (pages.getRowCount() != ranges[next].rowCount()) {
                // the reader's count of rows to return was set from the ranges
                throw new IllegalStateException("row group " + next + " of " + file.getFile()
                    + " was not read at the positions asked for");
              }
              next++;
              return pages;
            case "close":
              file.close();
              return null;
            case "hashCode":
              return System.identityHashCode(proxy);
            case "equals":
              return proxy == args[0];
            default:
              return "rows at positions of " + file.getFile();
          }
        }
      };
      Object restricted = Proxy.newProxyInstance(api.getClassLoader(), new Class<?>[] {api}, handler);
      source.set(reader, restricted);
      field(base, "totalRowCount").setLong(reader, total);
      RESTRICTED.incrementAndGet();
      return true;
    } catch (ReflectiveOperationException | RuntimeException | java.io.IOException e) {
      return false;
    }
  }

  private static RowRanges[] positionRanges(List<BlockMetaData> groups, long[] sorted, int n) {
    RowRanges[] ranges = new RowRanges[groups.size()];
    int at = 1;
    for (int g = 0; g < groups.size(); g++) {
      BlockMetaData group = groups.get(g);
      long first = group.getRowIndexOffset();
      long end = first + group.getRowCount();
      while (at <= n && sorted[at] < first) {
        at++;
      }
      int from = at;
      while (at <= n && sorted[at] < end) {
        at++;
      }
      if (at > from) {
        if (first < 0 || !indexed(group)) {
          return null;
        }
        ranges[g] = RowRanges.create(
            group.getRowCount(), every(at - from), new Singles(sorted, from, first));
      }
    }
    return ranges;
  }

  private static RowRanges[] keyRanges(
      ParquetFileReader file, List<BlockMetaData> groups, long[] sorted, int n, String column)
      throws java.io.IOException {
    RowRanges[] ranges = new RowRanges[groups.size()];
    for (int g = 0; g < groups.size(); g++) {
      BlockMetaData group = groups.get(g);
      ColumnChunkMetaData chunk = null;
      for (ColumnChunkMetaData c : group.getColumns()) {
        if (c.getPath().toDotString().equals(column)) {
          chunk = c;
        }
      }
      if (chunk == null || !indexed(group)) {
        return null;
      }
      ColumnIndex index = file.readColumnIndex(chunk);
      OffsetIndex offsets = file.readOffsetIndex(chunk);
      if (index == null || offsets == null) {
        return null;
      }
      List<ByteBuffer> mins = index.getMinValues();
      List<ByteBuffer> maxes = index.getMaxValues();
      List<Boolean> nulls = index.getNullPages();
      List<Integer> kept = new ArrayList<>();
      for (int p = 0; p < offsets.getPageCount(); p++) {
        if (!nulls.get(p) && holds(sorted, n, int64(mins.get(p)), int64(maxes.get(p)))) {
          kept.add(p);
        }
      }
      if (!kept.isEmpty()) {
        ranges[g] = RowRanges.create(group.getRowCount(), kept.stream().mapToInt(i -> i).iterator(),
            offsets);
      }
    }
    return ranges;
  }

  private static long int64(ByteBuffer b) {
    return b.duplicate().order(ByteOrder.LITTLE_ENDIAN).getLong(0);
  }

  // Whether one of sorted[1..n] lies in [min, max].
  private static boolean holds(long[] sorted, int n, long min, long max) {
    int found = Arrays.binarySearch(sorted, 1, n + 1, min);
    int at = found >= 0 ? found : -found - 1;
    return at <= n && sorted[at] <= max;
  }

  // Ranges of single rows come from the page index of a file written with one.
  private static boolean indexed(BlockMetaData group) {
    for (ColumnChunkMetaData column : group.getColumns()) {
      if (column.getOffsetIndexReference() == null) {
        return false;
      }
    }
    return true;
  }

  private static Field field(Class<?> type, String name) throws NoSuchFieldException {
    for (Class<?> c = type; c != null; c = c.getSuperclass()) {
      try {
        Field f = c.getDeclaredField(name);
        f.setAccessible(true);
        return f;
      } catch (NoSuchFieldException e) {
        // declared higher up
      }
    }
    throw new NoSuchFieldException(name);
  }

  private static PrimitiveIterator.OfInt every(int count) {
    return java.util.stream.IntStream.range(0, count).iterator();
  }

  /** Each position as a "page" of one row, relative to its row group: ranges of single rows. */
  private static final class Singles implements OffsetIndex {
    private final long[] sorted;
    private final int from;
    private final long first;

    Singles(long[] sorted, int from, long first) {
      this.sorted = sorted;
      this.from = from;
      this.first = first;
    }

    @Override
    public int getPageCount() {
      return sorted.length;
    }

    @Override
    public long getOffset(int page) {
      return 0;
    }

    @Override
    public int getCompressedPageSize(int page) {
      return 0;
    }

    @Override
    public long getFirstRowIndex(int page) {
      return sorted[from + page] - first;
    }

    @Override
    public long getLastRowIndex(int page, long rowGroupRowCount) {
      return getFirstRowIndex(page);
    }
  }
}
