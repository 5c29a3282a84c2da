package io.changelake.spark;

import java.nio.ByteBuffer;
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
 * the table holds an int32 count and that many int64 positions; each file's set becomes
 * {@link Positions} the first time a task meets the file, so a row costs one bit test.
 */
public final class InPositions extends PerFile {
  private static final long serialVersionUID = 1L;

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
    long[] values = new long[n + 1];
    for (int i = 1; i <= n; i++) {
      values[i] = in.getLong();
    }
    return Positions.of(values, n);
  }

  public boolean contains(UTF8String name, long p) {
    long[] entry = entry(name);
    return entry != null && Positions.contains(entry, p);
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
