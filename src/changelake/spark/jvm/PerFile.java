package io.changelake.spark;

import java.io.Serializable;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.codegen.Block;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeBlock;
import org.apache.spark.sql.catalyst.expressions.codegen.JavaCode;
import org.apache.spark.unsafe.types.UTF8String;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A Catalyst expression over a row's data file name that looks up a per-file entry in a
 * broadcast table: the file name's entry is found once per file, not once per row, since rows of
 * one file arrive together (a name equal by reference to the last one skips the lookup).
 *
 * <p>The broadcast table is little-endian: per file, an int32 length and the UTF-8 name, then
 * what {@link #parseEntry} reads.
 */
public abstract class PerFile extends Expression implements Serializable {
  private static final long serialVersionUID = 1L;

  protected final Broadcast<byte[]> table;
  private transient volatile Map<UTF8String, long[]> entries;
  private transient volatile Last last;

  private static final class Last {
    final UTF8String name;
    final long[] entry;

    Last(UTF8String name, long[] entry) {
      this.name = name;
      this.entry = entry;
    }
  }

  PerFile(Broadcast<byte[]> table) {
    this.table = table;
  }

  /** Read one file's entry from {@code in}, positioned after the file's name. */
  protected abstract long[] parseEntry(ByteBuffer in);

  /** The entry of file {@code name}, or null if the table has none. */
  public final long[] entry(UTF8String name) {
    Last l = last;
    if (l == null || (l.name != name && !l.name.equals(name))) {
      Map<UTF8String, long[]> all = entries;
      if (all == null) {
        all = parse();
        entries = all;
      }
      // The name may point into a buffer the reader reuses for the next row: keep a copy.
      l = new Last(name.copy(), all.get(name));
      last = l;
    }
    return l.entry;
  }

  private Map<UTF8String, long[]> parse() {
    ByteBuffer in = ByteBuffer.wrap(table.value()).order(ByteOrder.LITTLE_ENDIAN);
    Map<UTF8String, long[]> out = new HashMap<>();
    while (in.hasRemaining()) {
      byte[] name = new byte[in.getInt()];
      in.get(name);
      out.put(UTF8String.fromBytes(name), parseEntry(in));
    }
    return out;
  }

  @Override
  public boolean canEqual(Object that) {
    return that != null && that.getClass() == getClass();
  }

  // Structural equality, as Catalyst's case classes have: a cached or reused plan is found by
  // comparing (canonicalized) expressions, so two copies of one expression must be equal.
  @Override
  public boolean equals(Object that) {
    if (this == that) {
      return true;
    }
    if (!canEqual(that)) {
      return false;
    }
    PerFile other = (PerFile) that;
    int n = productArity();
    if (n != other.productArity()) {
      return false;
    }
    for (int i = 0; i < n; i++) {
      if (!java.util.Objects.equals(key(productElement(i)), key(other.productElement(i)))) {
        return false;
      }
    }
    return true;
  }

  @Override
  public int hashCode() {
    int h = getClass().hashCode();
    for (int i = 0; i < productArity(); i++) {
      h = 31 * h + java.util.Objects.hashCode(key(productElement(i)));
    }
    return h;
  }

  private static Object key(Object element) {
    return element instanceof Broadcast ? ((Broadcast<?>) element).id() : element;
  }

  @Override
  public String toString() {
    return prettyName() + "(" + String.join(", ", childNames()) + ")";
  }

  private List<String> childNames() {
    return CollectionConverters.asJava(children()).stream().map(Object::toString).toList();
  }

  static Seq<Expression> seq(Expression... children) {
    return CollectionConverters.asScala(List.of(children)).toList();
  }

  static Block block(String code) {
    return new CodeBlock(
        CollectionConverters.asScala(List.of(code)).toList(),
        CollectionConverters.asScala(List.<JavaCode>of()).toList());
  }

}
