package io.changelake.spark;

import java.nio.ByteBuffer;
import java.util.Arrays;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.catalyst.expressions.codegen.FalseLiteral$;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.unsafe.types.UTF8String;
import scala.collection.immutable.IndexedSeq;
import scala.collection.immutable.Seq;

/**
 * {@code changelake_in_positions(file_name, position)}: whether the row at {@code position} of
 * data file {@code file_name} is in a broadcast set of positions (a deletion vector). Per file
 * the table holds an int32 count and that many int64 positions; each file's set becomes a bitmap
 * (or, if the positions are few and far apart, a sorted array) the first time a task meets the
 * file, so a row costs one bit test.
 */
public final class InPositions extends PerFile {
  private static final long serialVersionUID = 1L;

  // The first word of a file's entry: a bitmap of the positions follows, or (when a bitmap
  // would be much larger than the positions: few positions spread far) the sorted positions.
  private static final long BITMAP = 0;
  private static final long SORTED = 1;

  private final Expression file;
  private final Expression position;

  public InPositions(Expression file, Expression position, Broadcast<byte[]> table) {
    super(table);
    this.file = file;
    this.position = position;
  }

  @Override
  protected long[] parseEntry(ByteBuffer in) {
    int n = in.getInt();
    long[] sorted = new long[n + 1];
    for (int i = 1; i <= n; i++) {
      sorted[i] = in.getLong();
    }
    Arrays.sort(sorted, 1, n + 1);
    long words = n == 0 ? 0 : (sorted[n] >>> 6) + 1;
    if (words > 4L * n + 1024) {
      sorted[0] = SORTED;
      return sorted;
    }
    long[] bitmap = new long[(int) words + 1];
    bitmap[0] = BITMAP;
    for (int i = 1; i <= n; i++) {
      long p = sorted[i];
      bitmap[1 + (int) (p >>> 6)] |= 1L << (p & 63);
    }
    return bitmap;
  }

  public boolean contains(UTF8String name, long p) {
    long[] entry = entry(name);
    if (entry == null || p < 0) {
      return false;
    }
    if (entry[0] == SORTED) {
      return Arrays.binarySearch(entry, 1, entry.length, p) >= 0;
    }
    long word = 1 + (p >>> 6);
    return word < entry.length && (entry[(int) word] & (1L << (p & 63))) != 0;
  }

  @Override
  public Seq<Expression> children() {
    return seq(file, position);
  }

  @Override
  public Expression withNewChildrenInternal(IndexedSeq<Expression> c) {
    return new InPositions(c.apply(0), c.apply(1), table);
  }

  @Override
  public DataType dataType() {
    return DataTypes.BooleanType;
  }

  @Override
  public boolean nullable() {
    return false;
  }

  @Override
  public Object eval(InternalRow row) {
    return contains((UTF8String) file.eval(row), (Long) position.eval(row));
  }

  @Override
  public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
    String self = ctx.addReferenceObj("inPositions", this, InPositions.class.getName());
    ExprCode f = file.genCode(ctx);
    ExprCode p = position.genCode(ctx);
    String code = f.code() + "\n" + p.code() + "\nboolean " + ev.value() + " = " + self
        + ".contains(" + f.value() + ", " + p.value() + ");";
    return ev.copy(block(code), FalseLiteral$.MODULE$, ev.value());
  }

  @Override
  public String prettyName() {
    return "changelake_in_positions";
  }

  @Override
  public int productArity() {
    return 3;
  }

  @Override
  public Object productElement(int n) {
    switch (n) {
      case 0: return file;
      case 1: return position;
      case 2: return table;
      default: throw new IndexOutOfBoundsException(Integer.toString(n));
    }
  }
}
