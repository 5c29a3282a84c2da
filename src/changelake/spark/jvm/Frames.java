package io.changelake.spark;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.SparkContext;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.analysis.UnresolvedRelation;
import org.apache.spark.sql.catalyst.parser.ParseException;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias;
import org.apache.spark.sql.catalyst.plans.logical.UnresolvedWith;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.QueryExecution;
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
 *
 * <p>Each plan runs in a copy of the session. Where its inputs are small (at most {@link
 * #SMALL_INPUT} bytes of stored data) the copy runs without adaptive execution, with one shuffle
 * partition, without broadcast joins (but hinted ones) and with interpreted expressions: on a
 * few rows AQE and broadcasts only split the plan into more jobs, more partitions only add
 * tasks, and generated code is compiled to run once (measured in one process: a view's changes
 * 23% and a refresh 19% faster, a 20,000-row change query 29% slower; bench/ANALYSIS.md). Larger
 * inputs keep the session's own settings.
 */
public final class Frames {
  /** Separates the SQL expressions of one {@link #select} (a character SQL text never holds). */
  public static final String SEPARATOR = "\u0001";

  /** The configuration key of the largest input (bytes) planned as small; 0: never. */
  public static final String SMALL_INPUT = "spark.changelake.smallInputBytes";

  static final long DEFAULT_SMALL_INPUT = 8L << 20;

  /** Set in a plan's own session: "small" or "large", a space and the input's size in bytes. */
  static final String PLANNED = "spark.changelake.plannedInput";

  private static final String COMMIT_PROTOCOL = "spark.sql.sources.commitProtocolClass";
  // Spark's local properties of a thread's call site (org.apache.spark.util.CallSite)
  private static final String CALL_SITE_SHORT = "callSite.short";
  private static final String CALL_SITE_LONG = "callSite.long";

  // One shuffle partition is what AQE would coalesce a small input's shuffles to; joins are
  // sort-merge joins in the query's own job, not a job per broadcast (static size estimates of
  // joins are products of their inputs' sizes: a join would be broadcast or not by the number
  // of files, not by its rows).
  private static final Map<String, String> SMALL_SETTINGS =
      Map.of(
          "spark.sql.adaptive.enabled", "false",
          "spark.sql.shuffle.partitions", "1",
          "spark.sql.autoBroadcastJoinThreshold", "-1",
          "spark.sql.codegen.wholeStage", "false",
          "spark.sql.codegen.factoryMode", "NO_CODEGEN");

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
    List<String> names = new ArrayList<>();
    List<String> keys = new ArrayList<>();
    boolean anyLate = false;
    int count = in.getInt();
    for (int i = 0; i < count; i++) {
      String name = string(in);
      String paths = string(in);
      String schema = string(in);
      byte[] table = new byte[in.getInt()];
      in.get(table);
      byte flags = in.get();
      boolean positions = (flags & 1) != 0;
      boolean late = (flags & 2) != 0;
      leaves.put(name, ChangelakeParquet.relation(spark, paths, schema, table, positions, late));
      names.add(name);
      keys.add(schema + (positions ? " with positions" : "") + (late ? " late" : ""));
      anyLate |= late;
    }
    int named = in.getInt();
    for (int i = 0; i < named; i++) {
      leaves.put(string(in), logical(frames.get(i)));
    }
    LogicalPlan parsed = spark.sessionState().sqlParser().parsePlan(sql);
    // A session of the plan's own (a copy, ~1 ms: it sees the temporary views, functions and
    // settings the session has now): its settings are chosen by the input's size once the plan
    // is analysed (planning, which they steer, comes with the first action), and a write of
    // the plan sets its commit protocol there (observed metrics stay with their session).
    SparkSession own = spark.cloneSession();
    if (anyLate) { // a filter over a late read goes into its reader (ReaderCondition)
      own.sessionState().experimentalMethods().extraOptimizations_$eq(
          CollectionConverters.asScala(List.of(ReaderCondition.RULE)).toList());
    }
    Bound.Shape shape =
        named == 0 && Bound.enabled(spark) ? Bound.shape(parsed, names, keys) : null;
    Bound.Binding binding = shape == null ? null : Bound.bound(spark, own, shape, names, leaves);
    var df =
        org.apache.spark.sql.classic.Dataset.ofRows(
            own, binding != null ? binding.plan() : substitute(parsed, leaves));
    if (binding != null) {
      BINDINGS.put(df, binding);
    }
    long bytes = inputBytes(df.logicalPlan());
    boolean small = bytes <= smallInput(spark);
    if (small) {
      SMALL_SETTINGS.forEach((key, value) -> own.sessionState().conf().setConfString(key, value));
    }
    own.sessionState().conf().setConfString(PLANNED, (small ? "small " : "large ") + bytes);
    return df;
  }

  // The plans of #plan bound from a kept one (Bound), for #execution.
  private static final Map<Dataset<Row>, Bound.Binding> BINDINGS =
      java.util.Collections.synchronizedMap(new java.util.WeakHashMap<>());

  /**
   * How to run {@code df} as it is: for a plan of {@link #plan} bound from a kept one, an
   * execution whose optimized plan is the kept one's, bound (Bound#optimized), where it can be
   * kept; else {@code df}'s own.
   */
  public static QueryExecution execution(Dataset<Row> df) {
    var classic = (org.apache.spark.sql.classic.Dataset<Row>) df;
    Bound.Binding binding = BINDINGS.get(df);
    SparkSession own = classic.sparkSession();
    String planned = own.sessionState().conf().getConfString(PLANNED, null);
    if (binding == null || planned == null) {
      return classic.queryExecution();
    }
    // the optimizer's settings: the plan's size class and every setting of its session
    var settings = new java.util.TreeMap<>(CollectionConverters.asJava(own.conf().getAll()));
    settings.remove(PLANNED);
    String mode = planned.split(" ")[0] + settings;
    LogicalPlan optimized = Bound.optimized(own, mode, binding);
    if (optimized == null) {
      return classic.queryExecution();
    }
    return new KeptExecution(own, classic.logicalPlan(), optimized);
  }

  /** An execution of an analysed plan whose optimized plan is given. */
  private static final class KeptExecution extends QueryExecution {
    private final LogicalPlan optimized;

    KeptExecution(SparkSession spark, LogicalPlan analysed, LogicalPlan optimized) {
      super(
          spark,
          analysed,
          QueryExecution.$lessinit$greater$default$3(),
          QueryExecution.$lessinit$greater$default$4(),
          QueryExecution.$lessinit$greater$default$5(),
          QueryExecution.$lessinit$greater$default$6(),
          QueryExecution.$lessinit$greater$default$7(),
          QueryExecution.$lessinit$greater$default$8());
      this.optimized = optimized;
    }

    @Override
    public LogicalPlan optimizedPlan() {
      return optimized;
    }
  }

  /**
   * {@code df}, a plan of {@link #plan}, to run without adaptive execution: a plan whose joins
   * are broadcasts its hints chose and that shuffles nothing (a lookup of stored rows) gains
   * nothing from it but a job per broadcast and per stage.
   */
  public static Dataset<Row> fixed(Dataset<Row> df) {
    var conf = ((org.apache.spark.sql.classic.Dataset<Row>) df).sparkSession().sessionState().conf();
    if (conf.getConfString(PLANNED, null) != null) {
      conf.setConfString("spark.sql.adaptive.enabled", "false");
    }
    return df;
  }

  private static long smallInput(SparkSession spark) {
    String limit = spark.sessionState().conf().getConfString(SMALL_INPUT, null);
    if (limit == null) {
      return DEFAULT_SMALL_INPUT;
    }
    try {
      long bytes = Long.parseLong(limit.trim());
      if (bytes >= 0) {
        return bytes;
      }
    } catch (NumberFormatException e) {
      // refused below
    }
    throw new IllegalArgumentException(
        SMALL_INPUT + " is '" + limit + "'; set it to a number of bytes (0: every plan keeps the"
            + " session's adaptive execution and code generation).");
  }

  /**
   * The bytes the leaves of {@code plan} hold, as Spark estimates them (a file read: the files'
   * sizes; a local relation: its rows'). A leaf of unknown size counts as Spark's default size,
   * larger than any small input.
   */
  static long inputBytes(LogicalPlan plan) {
    scala.math.BigInt total = scala.math.BigInt.apply(0);
    for (LogicalPlan leaf : CollectionConverters.asJava(plan.collectLeaves())) {
      total = total.$plus(leaf.stats().sizeInBytes());
    }
    return total.isValidLong() ? total.toLong() : Long.MAX_VALUE;
  }

  /**
   * Append {@code df} as Parquet files to the directory {@code path}, written in place by {@link
   * DirectCommitProtocol}: set for the write on the session of a plan of {@link #plan} (its
   * own), else on a copy of {@code df}'s session (the user's own writes keep Spark's protocol).
   * {@code oneFileIfSmall}: a plan of a small input is written as one file, without a shuffle;
   * others keep the plan's partitions.
   */
  public static void write(Dataset<Row> df, String path, boolean oneFileIfSmall) {
    write(df, path, oneFileIfSmall, "");
  }

  /**
   * {@link #write(Dataset, String, boolean)} with the writer's {@code options}: "key=value"
   * lines (Parquet's own settings, such as its page size).
   */
  public static void write(Dataset<Row> df, String path, boolean oneFileIfSmall, String options) {
    var classic = (org.apache.spark.sql.classic.Dataset<Row>) df;
    SparkSession spark = classic.sparkSession();
    String planned = spark.sessionState().conf().getConfString(PLANNED, null);
    boolean own = planned != null;
    if (oneFileIfSmall && own && planned.startsWith("small ")) {
      classic = (org.apache.spark.sql.classic.Dataset<Row>) classic.coalesce(1);
    }
    if (!own) {
      spark = spark.cloneSession();
      classic = org.apache.spark.sql.classic.Dataset.ofRows(spark, classic.logicalPlan());
    }
    var conf = spark.sessionState().conf();
    String before = conf.getConfString(COMMIT_PROTOCOL, null);
    conf.setConfString(COMMIT_PROTOCOL, DirectCommitProtocol.class.getName());
    try {
      var writer = classic.write().mode("append");
      for (String line : options.split("\n")) {
        int at = line.indexOf('=');
        if (at > 0) {
          writer = writer.option(line.substring(0, at), line.substring(at + 1));
        }
      }
      var parquet = writer;
      labelled(
          spark.sparkContext(),
          "changelake write",
          () -> {
            parquet.parquet(path);
            return null;
          });
    } finally {
      if (before == null) {
        conf.unsetConf(COMMIT_PROTOCOL);
      } else {
        conf.setConfString(COMMIT_PROTOCOL, before);
      }
    }
  }

  /**
   * {@code action}'s result, its jobs and RDDs labelled {@code label} where Spark shows where
   * they were made (the UI's call site), unless the thread has a label already: Spark otherwise
   * walks the thread's stack for every RDD a plan makes.
   */
  static <T> T labelled(SparkContext sc, String label, java.util.function.Supplier<T> action) {
    if (sc.getLocalProperty(CALL_SITE_SHORT) != null) {
      return action.get();
    }
    sc.setLocalProperty(CALL_SITE_SHORT, label);
    sc.setLocalProperty(CALL_SITE_LONG, label);
    try {
      return action.get();
    } finally {
      sc.setLocalProperty(CALL_SITE_SHORT, null);
      sc.setLocalProperty(CALL_SITE_LONG, null);
    }
  }

  /**
   * How {@link #plan} chose to run {@code df}, for EXPLAIN: one line; null for a DataFrame it
   * did not plan.
   */
  public static String choice(Dataset<Row> df) {
    SparkSession spark = ((org.apache.spark.sql.classic.Dataset<Row>) df).sparkSession();
    String planned = spark.sessionState().conf().getConfString(PLANNED, null);
    if (planned == null) {
      return null;
    }
    String[] sizeOf = planned.split(" ", 2);
    long bytes = Long.parseLong(sizeOf[1]);
    String size = bytes == Long.MAX_VALUE ? "unknown size" : bytes + " bytes";
    String limit = SMALL_INPUT + " = " + smallInput(spark);
    if (sizeOf[0].equals("small")) {
      return "changelake: small input (" + size + ", at most " + limit
          + "): adaptive execution off, one shuffle partition, no broadcasts, expressions"
          + " interpreted";
    }
    return "changelake: input of " + size + " (over " + limit
        + "): the session's adaptive execution and code generation";
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
