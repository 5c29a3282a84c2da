package io.changelake.spark;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.analysis.UnresolvedRelation;
import org.apache.spark.sql.catalyst.parser.ParseException;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias;
import org.apache.spark.sql.catalyst.plans.logical.UnresolvedWith;
import org.apache.spark.sql.classic.SparkSession;
import scala.Tuple2;
import scala.Tuple3;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractPartialFunction;

/**
 * A statement's plan in one call from Python: each py4j call is a round trip, and every
 * DataFrame step makes Spark analyse a new plan.
 *
 * <p>{@link #plan} takes one SQL text whose leaves are named relations (changelake's reads,
 * described compactly, or DataFrames built before) and returns it analysed once. The leaves are
 * put in place of the names in the parsed plan, in subqueries and CTE definitions too: no
 * temporary view is registered.
 */
public final class Frames {
  /** Separates the SQL expressions of one {@link #select} (a character SQL text never holds). */
  public static final String SEPARATOR = "\u0001";

  private Frames() {}

  /** {@code df.selectExpr(...)} of the SQL expressions in {@code exprs}, separated by SEPARATOR. */
  public static Dataset<Row> select(Dataset<Row> df, String exprs) {
    return df.selectExpr(exprs.split(SEPARATOR, -1));
  }

  /** {@link #plan(SparkSession, String, byte[], List)} with no DataFrame leaves. */
  public static Dataset<Row> plan(SparkSession spark, String sql, byte[] reads)
      throws ParseException {
    return plan(spark, sql, reads, List.of());
  }

  /**
   * The query {@code sql}, analysed once, with its leaves in place: {@code reads} describes
   * changelake reads (little-endian: an int32 count, then per read its name, newline-separated
   * paths and JSON schema as int32-length UTF-8 strings, the reader's table as an int32 length and
   * bytes, and a byte: whether any file has positions to skip), followed by an int32 count and
   * the names of the DataFrame leaves {@code frames}, in order.
   */
  public static Dataset<Row> plan(
      SparkSession spark, String sql, byte[] reads, List<Dataset<Row>> frames)
      throws ParseException {
    ByteBuffer in = ByteBuffer.wrap(reads).order(ByteOrder.LITTLE_ENDIAN);
    Map<String, LogicalPlan> leaves = new HashMap<>();
    int count = in.getInt();
    for (int i = 0; i < count; i++) {
      String name = string(in);
      String paths = string(in);
      String schema = string(in);
      byte[] table = new byte[in.getInt()];
      in.get(table);
      boolean positions = in.get() != 0;
      leaves.put(name, ChangelakeParquet.relation(spark, paths, schema, table, positions));
    }
    int named = in.getInt();
    for (int i = 0; i < named; i++) {
      leaves.put(string(in), logical(frames.get(i)));
    }
    LogicalPlan parsed = spark.sessionState().sqlParser().parsePlan(sql);
    return org.apache.spark.sql.classic.Dataset.ofRows(spark, substitute(parsed, leaves));
  }

  private static LogicalPlan logical(Dataset<Row> df) {
    return ((org.apache.spark.sql.classic.Dataset<Row>) df).logicalPlan();
  }

  private static String string(ByteBuffer in) {
    byte[] bytes = new byte[in.getInt()];
    in.get(bytes);
    return new String(bytes, StandardCharsets.UTF_8);
  }

  /** {@code plan} with each relation named as a leaf replaced by the leaf's plan. */
  static LogicalPlan substitute(LogicalPlan plan, Map<String, LogicalPlan> leaves) {
    return plan.transformUpWithSubqueries(
        new AbstractPartialFunction<LogicalPlan, LogicalPlan>() {
          @Override
          public boolean isDefinedAt(LogicalPlan node) {
            return leafOf(node, leaves) != null || node instanceof UnresolvedWith;
          }

          @Override
          public LogicalPlan apply(LogicalPlan node) {
            LogicalPlan leaf = leafOf(node, leaves);
            if (leaf != null) {
              return leaf;
            }
            return withDefinitions((UnresolvedWith) node, leaves);
          }
        });
  }

  private static LogicalPlan leafOf(LogicalPlan node, Map<String, LogicalPlan> leaves) {
    if (!(node instanceof UnresolvedRelation relation)) {
      return null;
    }
    List<String> parts = CollectionConverters.asJava(relation.multipartIdentifier());
    return parts.size() == 1 ? leaves.get(parts.get(0)) : null;
  }

  /**
   * A CTE with the leaves put in its definitions, which are not children of the node. The
   * definitions are tuples whose arity differs between Spark versions: each is rebuilt with
   * its SubqueryAlias substituted.
   */
  private static LogicalPlan withDefinitions(UnresolvedWith with, Map<String, LogicalPlan> leaves) {
    List<Object> definitions = new ArrayList<>();
    for (Object definition : CollectionConverters.asJava(with.cteRelations())) {
      if (definition instanceof Tuple3<?, ?, ?> t) {
        definitions.add(new Tuple3<>(t._1(), (SubqueryAlias) substitute((SubqueryAlias) t._2(), leaves), t._3()));
      } else if (definition instanceof Tuple2<?, ?> t) {
        definitions.add(new Tuple2<>(t._1(), (SubqueryAlias) substitute((SubqueryAlias) t._2(), leaves)));
      } else {
        throw new IllegalStateException("unknown CTE definition " + definition);
      }
    }
    Object[] args = new Object[with.productArity()];
    for (int i = 0; i < args.length; i++) {
      args[i] = with.productElement(i);
    }
    args[1] = CollectionConverters.asScala(definitions).toList();
    return (LogicalPlan) with.makeCopy(args);
  }
}
