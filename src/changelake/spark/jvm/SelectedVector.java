package io.changelake.spark;

import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The rows {@code rows[0..n)} of a column vector, as a vector of n rows: a batch loses its deleted
 * rows without copying a value (row i of this vector is row {@code rows[i]} of the one below).
 */
final class SelectedVector extends ColumnVector {
  private final ColumnVector base;
  private final int[] rows;
  private final int n;

  SelectedVector(ColumnVector base, int[] rows, int n) {
    super(base.dataType());
    this.base = base;
    this.rows = rows;
    this.n = n;
  }

  @Override
  public void close() {
    // The reader below owns the vector and closes it.
  }

  @Override
  public boolean hasNull() {
    return base.hasNull() && numNulls() > 0;
  }

  @Override
  public int numNulls() {
    if (!base.hasNull()) {
      return 0;
    }
    int nulls = 0;
    for (int i = 0; i < n; i++) {
      if (base.isNullAt(rows[i])) {
        nulls++;
      }
    }
    return nulls;
  }

  @Override
  public boolean isNullAt(int rowId) {
    return base.isNullAt(rows[rowId]);
  }

  @Override
  public boolean getBoolean(int rowId) {
    return base.getBoolean(rows[rowId]);
  }

  @Override
  public byte getByte(int rowId) {
    return base.getByte(rows[rowId]);
  }

  @Override
  public short getShort(int rowId) {
    return base.getShort(rows[rowId]);
  }

  @Override
  public int getInt(int rowId) {
    return base.getInt(rows[rowId]);
  }

  @Override
  public long getLong(int rowId) {
    return base.getLong(rows[rowId]);
  }

  @Override
  public float getFloat(int rowId) {
    return base.getFloat(rows[rowId]);
  }

  @Override
  public double getDouble(int rowId) {
    return base.getDouble(rows[rowId]);
  }

  @Override
  public ColumnarArray getArray(int rowId) {
    return base.getArray(rows[rowId]);
  }

  @Override
  public ColumnarMap getMap(int rowId) {
    return base.getMap(rows[rowId]);
  }

  @Override
  public Decimal getDecimal(int rowId, int precision, int scale) {
    return base.getDecimal(rows[rowId], precision, scale);
  }

  @Override
  public UTF8String getUTF8String(int rowId) {
    return base.getUTF8String(rows[rowId]);
  }

  @Override
  public byte[] getBinary(int rowId) {
    return base.getBinary(rows[rowId]);
  }

  @Override
  public ColumnVector getChild(int ordinal) {
    return new SelectedVector(base.getChild(ordinal), rows, n);
  }
}
