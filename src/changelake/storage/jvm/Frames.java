package io.changelake.spark;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;

/**
 * DataFrame steps in one call from Python: each py4j call is a round trip, and building a
 * projection from Python column objects takes three or more per column.
 */
public final class Frames {
  /** Separates the SQL expressions of one {@link #select} (a character SQL text never holds). */
  public static final String SEPARATOR = "\u0001";

  private Frames() {}

  /** {@code df.selectExpr(...)} of the SQL expressions in {@code exprs}, separated by SEPARATOR. */
  public static Dataset<Row> select(Dataset<Row> df, String exprs) {
    return df.selectExpr(exprs.split(SEPARATOR, -1));
  }
}
