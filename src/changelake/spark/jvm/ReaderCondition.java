package io.changelake.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.BasePredicate;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.IsNotNull;
import org.apache.spark.sql.catalyst.expressions.Predicate$;
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression;
import org.apache.spark.sql.catalyst.expressions.Unevaluable;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.datasources.HadoopFsRelation;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractPartialFunction;

/**
 * A scan's filter evaluated inside changelake's reader before the scan's other columns are
 * decoded: late materialization in one pass. Per file, the reader first reads only the columns
 * the condition names (with the rows' positions), evaluates the condition there, and then
 * decodes the other columns at the matching positions only ({@link Late#restrict}: the pages
 * that hold none are not read). A row-level write reading every column of its target (an
 * UPDATE, a DELETE keeping before-images) asks for it; the filter stays in the plan above the
 * scan, so the scan's rows are a superset of what the filter keeps whatever happens here.
 *
 * <p>{@link #RULE} (an optimizer rule of the statement's own session) puts a filter directly
 * over such a scan into its format ({@link ChangelakeParquet#withCondition}): only a filter
 * whose every conjunct can be evaluated on the stored columns alone (deterministic, no
 * subquery, nothing Spark evaluates elsewhere such as a Python UDF), but for null checks of
 * the reader's own columns, which hold for every row; else nothing is pushed, so no
 * expression is evaluated on a row the plan's own filter would not evaluate it on.
 */
final class ReaderCondition implements Serializable {
  private static final long serialVersionUID = 1L;

  final Expression condition;
  // the attributes it references, in the order of the columns read for it
  final List<Attribute> inputs;

  private ReaderCondition(Expression condition, List<Attribute> inputs) {
    this.condition = condition;
    this.inputs = inputs;
  }

  /** What equality of scans compares: the condition, as SQL. */
  String text() {
    return condition.sql();
  }

  /** The stored columns the condition reads. */
  StructType columns() {
    List<StructField> fields = new ArrayList<>();
    for (Attribute a : inputs) {
      fields.add(new StructField(a.name(), a.dataType(), a.nullable(), a.metadata()));
    }
    return new StructType(fields.toArray(new StructField[0]));
  }

  /** A predicate over rows of {@link #columns()} (one per task: it is not thread-safe). */
  BasePredicate predicate(int partition) {
    BasePredicate p =
        Predicate$.MODULE$.create(condition, CollectionConverters.asScala(inputs).toList());
    p.initialize(partition);
    return p;
  }

  /**
   * The sorted positions ({@code [1..n]}, n at {@code [0]}) of {@code rows} (Spark's rows or
   * batches of {@link #columns()} with the row index at {@code index}, or, if {@code index} is
   * negative, every row of the file from its first, in order) that {@code predicate} keeps,
   * less those {@code skipped} holds (a deletion vector: see {@link Positions}).
   */
  static long[] matching(Iterator<Object> rows, int index, BasePredicate predicate, long[] skipped) {
    long[] found = new long[17];
    int n = 0;
    long count = 0;
    while (rows.hasNext()) {
      Object item = rows.next();
      ColumnarBatch batch = item instanceof ColumnarBatch ? (ColumnarBatch) item : null;
      int size = batch == null ? 1 : batch.numRows();
      for (int i = 0; i < size; i++, count++) {
        InternalRow row = batch == null ? (InternalRow) item : batch.getRow(i);
        long position =
            index < 0 ? count : batch == null ? row.getLong(index) : batch.column(index).getLong(i);
        if ((skipped == null || !Positions.contains(skipped, position)) && predicate.eval(row)) {
          if (++n == found.length) {
            found = Arrays.copyOf(found, found.length * 2);
          }
          found[n] = position;
        }
      }
    }
    found[0] = n;
    return found;
  }

  /** The optimizer rule that hands a filter to the late scan below it (see the class). */
  static final Rule<LogicalPlan> RULE =
      new Rule<LogicalPlan>() {
        @Override
        public LogicalPlan apply(LogicalPlan plan) {
          return plan.transformUp(
              new AbstractPartialFunction<LogicalPlan, LogicalPlan>() {
                @Override
                public boolean isDefinedAt(LogicalPlan node) {
                  return pushed(node) != null;
                }

                @Override
                public LogicalPlan apply(LogicalPlan node) {
                  LogicalPlan out = pushed(node);
                  return out == null ? node : out;
                }
              });
        }
      };

  /** {@code node} with its filter in the scan below, or null if it is no such filter. */
  private static LogicalPlan pushed(LogicalPlan node) {
    if (!(node instanceof Filter) || !(((Filter) node).child() instanceof LogicalRelation)) {
      return null;
    }
    Filter filter = (Filter) node;
    LogicalRelation scan = (LogicalRelation) filter.child();
    if (!(scan.relation() instanceof HadoopFsRelation)) {
      return null;
    }
    HadoopFsRelation files = (HadoopFsRelation) scan.relation();
    if (!(files.fileFormat() instanceof ChangelakeParquet)) {
      return null;
    }
    ChangelakeParquet format = (ChangelakeParquet) files.fileFormat();
    if (!format.late() || format.condition() != null) {
      return null;
    }
    ReaderCondition condition = of(filter.condition(), scan);
    if (condition == null) {
      return null;
    }
    HadoopFsRelation relation =
        files.copy(
            files.location(),
            files.partitionSchema(),
            files.dataSchema(),
            files.bucketSpec(),
            format.withCondition(condition),
            files.options(),
            files.sparkSession());
    LogicalRelation read =
        scan.copy(relation, scan.output(), scan.catalogTable(), scan.isStreaming(), scan.stream());
    return filter.withNewChildren(
        CollectionConverters.asScala(List.<LogicalPlan>of(read)).toIndexedSeq());
  }

  /** What of {@code condition} the reader can evaluate over {@code scan}'s stored columns. */
  private static ReaderCondition of(Expression condition, LogicalRelation scan) {
    List<Expression> kept = new ArrayList<>();
    for (Expression c : conjuncts(condition, new ArrayList<>())) {
      if (c instanceof IsNotNull && virtual(((IsNotNull) c).child())) {
        continue; // holds for every row the reader makes
      }
      if (!c.deterministic() || !evaluable(c)) {
        return null;
      }
      kept.add(c);
    }
    List<Attribute> inputs = new ArrayList<>();
    for (AttributeReference a : CollectionConverters.asJava(scan.output())) {
      if (kept.stream().anyMatch(c -> c.references().contains(a))) {
        if (ChangelakeParquet.isVirtual(a.name())) {
          return null;
        }
        inputs.add(a);
      }
    }
    if (kept.isEmpty() || inputs.isEmpty()) {
      return null;
    }
    Expression all = kept.get(0);
    for (Expression c : kept.subList(1, kept.size())) {
      all = new And(all, c);
    }
    for (Attribute a : CollectionConverters.asJava(all.references().toSeq())) {
      if (inputs.stream().noneMatch(i -> i.exprId().equals(a.exprId()))) {
        return null; // an outer reference: not the scan's column
      }
    }
    return new ReaderCondition(all, List.copyOf(inputs));
  }

  private static boolean virtual(Expression e) {
    return e instanceof AttributeReference
        && ChangelakeParquet.isVirtual(((AttributeReference) e).name());
  }

  private static List<Expression> conjuncts(Expression e, List<Expression> out) {
    if (e instanceof And) {
      conjuncts(((And) e).left(), out);
      conjuncts(((And) e).right(), out);
    } else {
      out.add(e);
    }
    return out;
  }

  // Whether the reader can evaluate e itself: no subquery, nothing Spark evaluates elsewhere.
  private static boolean evaluable(Expression e) {
    if (e instanceof Attribute) {
      return true; // bound to the columns read
    }
    if (e instanceof Unevaluable || e instanceof SubqueryExpression) {
      return false;
    }
    for (Expression child : CollectionConverters.asJava(e.children())) {
      if (!evaluable(child)) {
        return false;
      }
    }
    return true;
  }
}
