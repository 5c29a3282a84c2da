package io.changelake.spark;

import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A batch's METADATA$ROW_IDs: per row, the hex digits of (the row's identity XOR the table's
 * mask), exactly as Spark's SQL {@code hex(BIGINT)} prints them (upper case, no leading zeros),
 * written straight into one byte buffer per batch instead of evaluated by an expression per row.
 * Row i's digits end at byte {@code 16 * (i + 1)}; a length of 0 is NULL (an unknown identity).
 * The buffer is reused from batch to batch, as Spark's own vectors are.
 */
final class RowIdVector extends ColumnVector {
  private static final byte[] DIGITS = "0123456789ABCDEF".getBytes();

  private byte[] digits = new byte[0];
  private byte[] lengths = new byte[0];
  private int nulls;

  RowIdVector() {
    super(DataTypes.StringType);
  }

  /** Makes room for {@code rows} rows; every row must then be set. */
  void reset(int rows) {
    if (lengths.length < rows) {
      lengths = new byte[rows];
      digits = new byte[16 * rows];
    }
    nulls = 0;
  }

  void set(int row, long scrambled) {
    lengths[row] = (byte) write(scrambled, digits, 16 * (row + 1));
  }

  void setNull(int row) {
    lengths[row] = 0;
    nulls++;
  }

  /** The ROW_ID of one row, for the row-by-row path. */
  static UTF8String of(long scrambled) {
    byte[] out = new byte[16];
    int n = write(scrambled, out, 16);
    return UTF8String.fromBytes(out, 16 - n, n);
  }

  // Right-aligned, ending at ``end``, as org.apache.spark.sql.catalyst.expressions.Hex.hex.
  private static int write(long value, byte[] out, int end) {
    int n = 0;
    long rest = value;
    do {
      out[end - ++n] = DIGITS[(int) (rest & 0xF)];
      rest >>>= 4;
    } while (rest != 0);
    return n;
  }

  @Override
  public UTF8String getUTF8String(int rowId) {
    int n = lengths[rowId];
    return n == 0 ? null : UTF8String.fromBytes(digits, 16 * (rowId + 1) - n, n);
  }

  @Override
  public byte[] getBinary(int rowId) {
    UTF8String s = getUTF8String(rowId);
    return s == null ? null : s.getBytes();
  }

  @Override
  public boolean isNullAt(int rowId) {
    return lengths[rowId] == 0;
  }

  @Override
  public boolean hasNull() {
    return nulls > 0;
  }

  @Override
  public int numNulls() {
    return nulls;
  }

  @Override
  public void close() {}

  @Override
  public boolean getBoolean(int rowId) {
    throw new UnsupportedOperationException();
  }

  @Override
  public byte getByte(int rowId) {
    throw new UnsupportedOperationException();
  }

  @Override
  public short getShort(int rowId) {
    throw new UnsupportedOperationException();
  }

  @Override
  public int getInt(int rowId) {
    throw new UnsupportedOperationException();
  }

  @Override
  public long getLong(int rowId) {
    throw new UnsupportedOperationException();
  }

  @Override
  public float getFloat(int rowId) {
    throw new UnsupportedOperationException();
  }

  @Override
  public double getDouble(int rowId) {
    throw new UnsupportedOperationException();
  }

  @Override
  public ColumnarArray getArray(int rowId) {
    throw new UnsupportedOperationException();
  }

  @Override
  public ColumnarMap getMap(int rowId) {
    throw new UnsupportedOperationException();
  }

  @Override
  public Decimal getDecimal(int rowId, int precision, int scale) {
    throw new UnsupportedOperationException();
  }

  @Override
  public ColumnVector getChild(int ordinal) {
    throw new UnsupportedOperationException();
  }
}
