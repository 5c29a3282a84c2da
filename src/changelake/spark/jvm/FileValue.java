package io.changelake.spark;

import java.nio.ByteBuffer;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.unsafe.types.UTF8String;
import scala.collection.immutable.IndexedSeq;
import scala.collection.immutable.Seq;

/**
 * {@code changelake_file_value(file_name)}: value number {@code index} of the data file's row
 * in a broadcast table of per-file constants (a BIGINT, NULL if the value is NULL or the file is
 * not in the table). Per file the table holds an int64 null mask (bit i: value i is NULL), an
 * int32 count and that many int64 values.
 */
public final class FileValue extends PerFile {
  private static final long serialVersionUID = 1L;

  private final Expression file;
  private final int index;

  public FileValue(Expression file, Broadcast<byte[]> table, int index) {
    super(table);
    this.file = file;
    this.index = index;
  }

  @Override
  protected long[] parseEntry(ByteBuffer in) {
    long mask = in.getLong();
    int n = in.getInt();
    long[] entry = new long[n + 1];
    entry[0] = mask;
    for (int i = 1; i <= n; i++) {
      entry[i] = in.getLong();
    }
    return entry;
  }

  public boolean isNull(long[] entry) {
    return entry == null || ((entry[0] >>> index) & 1) != 0;
  }

  @Override
  public Seq<Expression> children() {
    return seq(file);
  }

  @Override
  public Expression withNewChildrenInternal(IndexedSeq<Expression> c) {
    return new FileValue(c.apply(0), table, index);
  }

  @Override
  public DataType dataType() {
    return DataTypes.LongType;
  }

  @Override
  public boolean nullable() {
    return true;
  }

  @Override
  public Object eval(InternalRow row) {
    long[] entry = entry((UTF8String) file.eval(row));
    return isNull(entry) ? null : entry[index + 1];
  }

  @Override
  public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
    String self = ctx.addReferenceObj("fileValue", this, FileValue.class.getName());
    String entry = ctx.freshName("entry");
    ExprCode f = file.genCode(ctx);
    String code = f.code() + "\nlong[] " + entry + " = " + self + ".entry(" + f.value() + ");\n"
        + "boolean " + ev.isNull() + " = " + self + ".isNull(" + entry + ");\n"
        + "long " + ev.value() + " = " + ev.isNull() + " ? -1L : " + entry + "[" + (index + 1)
        + "];";
    return ev.copy(block(code), ev.isNull(), ev.value());
  }

  @Override
  public String prettyName() {
    return "changelake_file_value";
  }

  @Override
  public String toString() {
    return prettyName() + "(" + file + ", " + index + ")";
  }

  @Override
  public int productArity() {
    return 3;
  }

  @Override
  public Object productElement(int n) {
    switch (n) {
      case 0: return file;
      case 1: return table;
      case 2: return index;
      default: throw new IndexOutOfBoundsException(Integer.toString(n));
    }
  }
}
