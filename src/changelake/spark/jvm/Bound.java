package io.changelake.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.WeakHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.UnaryOperator;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.analysis.FunctionRegistry$;
import org.apache.spark.sql.catalyst.analysis.UnresolvedAttribute;
import org.apache.spark.sql.catalyst.analysis.UnresolvedFunction;
import org.apache.spark.sql.catalyst.expressions.Cast;
import org.apache.spark.sql.catalyst.expressions.EqualTo;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.QueryPlanningTracker;
import org.apache.spark.sql.catalyst.plans.logical.LocalRelation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.UnresolvedWith;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.sources.BaseRelation;
import org.apache.spark.sql.types.IntegerType$;
import org.apache.spark.sql.types.LongType$;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.unsafe.types.UTF8String;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractPartialFunction;

/**
 * Analysed plans kept per shape of a statement, so that a plan made again with other files and
 * other per-round values (a dynamic table's refresh every round, a stream's read every
 * consumption) is bound, not analysed.
 *
 * <p>A plan's shape is its parsed SQL with two things abstracted: its leaves (changelake's
 * reads: the kept plan's leaf relations are replaced by the new reads' relations, keeping their
 * output attributes) and its parameters, the literals whose value cannot steer analysis: an
 * integer literal cast to BIGINT and a string compared by {@code =} (the per-file values of a
 * change scan's lookups: versions, sizes, file names), but for a change event's action. Anything else that could make analysis
 * differ (every other literal, function names, the reads' schemas) is part of the key. A plan
 * whose parameters analysis did not keep as they were, with a CTE, with rows as data (the
 * parser makes a VALUES of constants one), with a function that is not built in (a temporary
 * function may be replaced), with any other relation, or with DataFrame leaves, is not kept.
 *
 * <p>{@code spark.changelake.boundPlans=false} turns this off (each plan is analysed).
 */
public final class Bound {
  static final String ENABLED = "spark.changelake.boundPlans";

  private static final String PLAN_TEXT = "spark.sql.maxPlanStringLength";
  private static final int KEPT = 256;
  // names a relation's SQL gives its leaves and subqueries (spark/relation.py): they differ
  // between otherwise equal statements
  private static final Pattern FRESH = Pattern.compile("__cl_leaf\\d+__|\\b_q\\d+\\b");
  // the ids a parsed plan's aliases are given: they differ too
  private static final Pattern EXPR_ID = Pattern.compile("#\\d+");
  // a string literal a plan's text could confuse with a fresh name, an id or an attribute (the
  // text prints attributes with a leading quote, literals bare)
  private static final Pattern CONFUSABLE = Pattern.compile("__cl_leaf\\d+__|\\b_q\\d+\\b|#\\d|^'");
  // A change event's kind: its values are a closed set that steers the plan (a delta known to
  // hold inserts only compares it with constants), never a per-round value.
  private static final String ACTION = "METADATA$ACTION";
  private static final Map<SparkSession, Map<String, Kept>> KEPT_BY_SESSION = new WeakHashMap<>();
  private static final AtomicLong HITS = new AtomicLong();
  private static final AtomicLong OPTIMIZED_HITS = new AtomicLong();

  private record Kept(
      LogicalPlan analysed,
      List<Literal> parameters,
      List<LogicalRelation> leaves,
      Map<String, LogicalPlan> optimized) {
    Kept(LogicalPlan analysed, List<Literal> parameters, List<LogicalRelation> leaves) {
      this(analysed, parameters, leaves, new java.util.concurrent.ConcurrentHashMap<>());
    }
  }

  /**
   * A statement's plan as {@link #bound} made it from a kept one: the kept plan, and what it
   * put in place of the kept plan's leaf relations and parameters.
   */
  record Binding(
      LogicalPlan plan, Kept kept, Map<Object, BaseRelation> relations, List<Literal> values) {}

  /**
   * A statement's parsed plan with each parameter replaced by a marker literal of its own (a
   * value of its type that no other parameter has), and its key.
   */
  record Shape(String key, List<Literal> values, List<Literal> markers, LogicalPlan marked) {}

  private Bound() {}

  /** Plans bound from a kept plan since the JVM started (tests count them). */
  public static long hits() {
    return HITS.get();
  }

  /** Optimized plans bound from a kept one since the JVM started (tests count them). */
  public static long optimizedHits() {
    return OPTIMIZED_HITS.get();
  }

  /** On unless turned off, or a plan's text (the key) may be cut short by a setting. */
  static boolean enabled(SparkSession spark) {
    var conf = spark.sessionState().conf();
    return !"false".equalsIgnoreCase(conf.getConfString(ENABLED, "true"))
        && conf.getConfString(PLAN_TEXT, null) == null;
  }

  /**
   * The analysed plan of the statement {@code shape}, with {@code leaves} (changelake's reads,
   * in the order of {@code names}) and its parameters' values bound into the plan kept for its
   * shape; the shape is analysed (in {@code own}) and kept first if it was not. Null where it
   * cannot be kept: the caller analyses the statement itself.
   */
  static Binding bound(
      SparkSession spark, SparkSession own, Shape shape, List<String> names,
      Map<String, LogicalPlan> leaves) {
    Kept kept;
    synchronized (KEPT_BY_SESSION) {
      kept = kept(spark).get(shape.key());
    }
    if (kept == null) {
      kept = analysed(own, shape, names, leaves);
      synchronized (KEPT_BY_SESSION) {
        kept(spark).put(shape.key(), kept);
      }
    } else {
      HITS.incrementAndGet();
    }
    if (kept.analysed() == null || kept.parameters().size() != shape.values().size()) {
      return null;
    }
    Map<Object, Expression> values = new IdentityHashMap<>();
    for (int i = 0; i < shape.values().size(); i++) {
      Literal now = shape.values().get(i);
      if (!now.dataType().sameType(kept.parameters().get(i).dataType())) {
        return null;
      }
      values.put(kept.parameters().get(i), now);
    }
    // by relation: analysis gives a leaf read twice (a self-join) new attributes, not a new relation
    Map<Object, BaseRelation> relations = new IdentityHashMap<>();
    for (int i = 0; i < names.size(); i++) {
      relations.put(
          kept.leaves().get(i).relation(), ((LogicalRelation) leaves.get(names.get(i))).relation());
    }
    LogicalPlan plan = kept.analysed().transformUpWithSubqueries(replaced(relations, values));
    plan.setAnalyzed();
    return new Binding(plan, kept, relations, shape.values());
  }

  /**
   * The optimized plan of {@code binding}'s statement, made from the optimized plan kept for
   * its shape and {@code mode} (the session's settings, with those {@link Frames#plan} chose), which is optimized in
   * {@code own} and kept first if it was not; null if the shape's optimization cannot be kept.
   *
   * <p>The optimizer may fold a parameter with constants, compare it with one, or simplify by
   * its value: an optimized plan is kept only if optimizing the shape with its markers and with
   * every parameter of a type set to one other value (far from the markers, all equal) gives
   * the same plan with the parameters blanked, and every marker is still in it (one compared
   * with a constant is folded away). A parameter folded by a cast into BIGINT stays
   * recognizable by its value.
   */
  static LogicalPlan optimized(SparkSession own, String mode, Binding binding) {
    Kept kept = binding.kept();
    LogicalPlan marked = kept.optimized().get(mode);
    if (marked == null) {
      marked = kept.optimized().computeIfAbsent(mode, m -> checkedOptimization(own, kept));
    } else if (marked != NOT_KEPT) {
      OPTIMIZED_HITS.incrementAndGet();
    }
    if (marked == NOT_KEPT) {
      return null;
    }
    Map<Object, Expression> none = Map.of();
    LogicalPlan plan =
        marked
            .transformUpWithSubqueries(replaced(binding.relations(), none))
            .transformUpWithSubqueries(byValue(valuesOf(kept.parameters(), binding.values())));
    plan.setAnalyzed();
    return plan;
  }

  private static final LogicalPlan NOT_KEPT = new LocalRelation(
      scala.collection.immutable.List$.MODULE$.empty(),
      scala.collection.immutable.List$.MODULE$.empty(),
      false,
      scala.Option.empty());

  private static LogicalPlan checkedOptimization(SparkSession own, Kept kept) {
    var optimizer = own.sessionState().optimizer();
    LogicalPlan first =
        optimizer.executeAndTrack(kept.analysed(), new QueryPlanningTracker(scala.Option.empty()));
    Map<Object, Expression> others = new IdentityHashMap<>();
    List<Literal> alike = new ArrayList<>();
    for (Literal marker : kept.parameters()) {
      Literal other = new Literal(alikeValue(marker), marker.dataType());
      others.put(marker, other);
      alike.add(other);
    }
    LogicalPlan otherAnalysed =
        kept.analysed().transformUpWithSubqueries(replaced(Map.of(), others));
    otherAnalysed.setAnalyzed();
    LogicalPlan second =
        optimizer.executeAndTrack(otherAnalysed, new QueryPlanningTracker(scala.Option.empty()));
    String a = blanked(first, kept.parameters());
    String b = blanked(second, alike);
    return a.equals(b) && holdsAll(first, kept.parameters()) ? first : NOT_KEPT;
  }

  /**
   * Whether each of {@code markers} is in {@code plan} (by value: a cast into BIGINT is folded
   * into a literal of the same value): one the optimizer folded away (compared with a constant,
   * say) would be lost to the plans bound from it.
   */
  private static boolean holdsAll(LogicalPlan plan, List<Literal> markers) {
    Set<List<Object>> seen = new HashSet<>();
    plan.foreachWithSubqueries(
        node -> {
          for (Expression e : CollectionConverters.asJava(node.expressions())) {
            e.foreach(
                x -> {
                  if (x instanceof Literal l && l.value() != null) {
                    seen.add(List.of(l.dataType(), l.value()));
                  }
                  return null;
                });
          }
          return null;
        });
    for (Literal marker : markers) {
      if (variants(marker, marker).keySet().stream().noneMatch(seen::contains)) {
        return false;
      }
    }
    return true;
  }

  /** The value every parameter of {@code marker}'s type takes in the second optimization. */
  private static Object alikeValue(Literal marker) {
    if (marker.dataType() instanceof StringType) {
      return UTF8String.fromString("\u0001changelake other parameter");
    }
    return marker.dataType() == LongType$.MODULE$
        ? (Object) (Long.MAX_VALUE - 7)
        : (Object) (Integer.MAX_VALUE - 7);
  }

  /** The text of {@code plan} with each literal of {@code parameters}' values blanked. */
  private static String blanked(LogicalPlan plan, List<Literal> parameters) {
    Map<List<Object>, Expression> blanks = new HashMap<>();
    for (Literal p : parameters) {
      for (Map.Entry<List<Object>, Literal> e : variants(p, p).entrySet()) {
        blanks.put(e.getKey(), Literal.create(null, e.getValue().dataType()));
      }
    }
    String text =
        plan.transformUpWithSubqueries(byValue(blanks))
            .treeString(true, false, Integer.MAX_VALUE, false, false);
    return EXPR_ID.matcher(text).replaceAll("#");
  }

  /** Per (type, value) of each marker (and of its cast into BIGINT), the value's literal. */
  private static Map<List<Object>, Expression> valuesOf(List<Literal> markers, List<Literal> values) {
    Map<List<Object>, Expression> out = new HashMap<>();
    for (int i = 0; i < markers.size(); i++) {
      out.putAll(variants(markers.get(i), values.get(i)));
    }
    return out;
  }

  private static Map<List<Object>, Literal> variants(Literal marker, Literal value) {
    Map<List<Object>, Literal> out = new HashMap<>();
    out.put(List.of(marker.dataType(), marker.value()), value);
    if (marker.dataType() == IntegerType$.MODULE$) {
      out.put(
          List.of(LongType$.MODULE$, ((Integer) marker.value()).longValue()),
          new Literal(((Number) value.value()).longValue(), LongType$.MODULE$));
    }
    return out;
  }

  private static AbstractPartialFunction<LogicalPlan, LogicalPlan> byValue(
      Map<List<Object>, ? extends Expression> literals) {
    return everywhere(
        node ->
            node.transformExpressionsUp(
                new AbstractPartialFunction<Expression, Expression>() {
                  @Override
                  public boolean isDefinedAt(Expression e) {
                    return e instanceof Literal l
                        && l.value() != null
                        && literals.containsKey(List.of(l.dataType(), l.value()));
                  }

                  @Override
                  public Expression apply(Expression e) {
                    Literal l = (Literal) e;
                    return literals.get(List.of(l.dataType(), l.value()));
                  }
                }));
  }

  /**
   * The analysis of the marked plan of {@code shape}, kept if analysis kept each marker as it
   * was (else its value might have steered analysis) and each leaf; else a Kept of nothing, so
   * that the shape is not analysed twice again.
   */
  private static Kept analysed(
      SparkSession own, Shape shape, List<String> names, Map<String, LogicalPlan> leaves) {
    LogicalPlan analysed =
        own.sessionState()
            .analyzer()
            .executeAndCheck(Frames.substitute(shape.marked(), leaves), new QueryPlanningTracker(scala.Option.empty()));
    Map<Object, Boolean> found = new IdentityHashMap<>();
    analysed.foreachWithSubqueries(
        node -> {
          found.put(node, true);
          for (Expression e : CollectionConverters.asJava(node.expressions())) {
            e.foreach(
                x -> {
                  found.put(x, true);
                  return null;
                });
          }
          return null;
        });
    List<LogicalRelation> kept = new ArrayList<>();
    Map<Object, Boolean> read = new IdentityHashMap<>();
    Kept none = new Kept(null, List.of(), List.of());
    for (String name : names) {
      if (!(leaves.get(name) instanceof LogicalRelation relation)) {
        return none;
      }
      kept.add(relation);
      read.put(relation.relation(), true);
    }
    for (Object node : found.keySet()) {
      // any other relation would be read as it was when the plan was kept
      if (node instanceof LogicalRelation other && !read.containsKey(other.relation())) {
        return none;
      }
    }
    for (Literal marker : shape.markers()) {
      if (!found.containsKey(marker)) {
        return none;
      }
    }
    return new Kept(analysed, shape.markers(), kept);
  }

  private static Map<String, Kept> kept(SparkSession spark) {
    return KEPT_BY_SESSION.computeIfAbsent(
        spark,
        s ->
            new LinkedHashMap<>(16, 0.75f, true) {
              @Override
              protected boolean removeEldestEntry(Map.Entry<String, Kept> eldest) {
                return size() > KEPT;
              }
            });
  }

  /**
   * The shape of {@code parsed} with changelake's reads named {@code names} ({@code keys}: what
   * else of each steers analysis, its schema), or null if it cannot be kept.
   */
  static Shape shape(LogicalPlan parsed, List<String> names, List<String> keys) {
    boolean[] keepable = {true};
    List<Literal> values = new ArrayList<>();
    List<Literal> markers = new ArrayList<>();
    LogicalPlan marked =
        parsed.transformUpWithSubqueries(
            everywhere(
                node -> {
                  // a CTE's definitions are not children; rows the parser made into data do not
                  // print in the plan's text (the key)
                  if (node instanceof UnresolvedWith || node instanceof LocalRelation) {
                    keepable[0] = false;
                  }
                  return node.transformExpressionsUp(parametrized(values, markers, keepable));
                }));
    if (!keepable[0]) {
      return null;
    }
    // the key: the plan with each parameter as a NULL of its type, fresh names by position
    Map<Object, Expression> blanks = new IdentityHashMap<>();
    for (Literal marker : markers) {
      blanks.put(marker, Literal.create(null, marker.dataType()));
    }
    // every field of every node (a plan's text shows 25 by default)
    String text =
        marked
            .transformUpWithSubqueries(replaced(Map.of(), blanks))
            .treeString(true, false, Integer.MAX_VALUE, false, false);
    text = EXPR_ID.matcher(text).replaceAll("#");
    StringBuilder key = new StringBuilder();
    Map<String, String> renamed = new HashMap<>();
    for (int i = 0; i < names.size(); i++) {
      renamed.put(names.get(i), "__leaf" + i + "__");
    }
    Matcher m = FRESH.matcher(text);
    while (m.find()) {
      String name = renamed.computeIfAbsent(m.group(), g -> "_f" + renamed.size());
      m.appendReplacement(key, Matcher.quoteReplacement(name));
    }
    m.appendTail(key);
    for (String k : keys) {
      key.append('\u0001').append(k);
    }
    return new Shape(key.toString(), values, markers, marked);
  }

  /**
   * Each parameter of an expression replaced by a marker of its own, its value appended to
   * {@code values} and its marker to {@code markers} (in the order of the plan's traversal);
   * {@code keepable[0]} false where a function is not built in or a literal's text could be
   * confused in the key (a fresh name, an expression id, an attribute).
   */
  private static AbstractPartialFunction<Expression, Expression> parametrized(
      List<Literal> values, List<Literal> markers, boolean[] keepable) {
    return everywhere(
        e -> {
          if (e instanceof UnresolvedFunction f && !builtin(f)) {
            keepable[0] = false;
          }
          if (e instanceof Literal l
              && l.dataType() instanceof StringType
              && l.value() != null
              && CONFUSABLE.matcher(l.value().toString()).find()) {
            keepable[0] = false;
          }
          if (e instanceof Cast c
              && c.dataType() == LongType$.MODULE$
              && c.child() instanceof Literal l
              && (l.dataType() == IntegerType$.MODULE$ || l.dataType() == LongType$.MODULE$)) {
            return new Cast(parameter(l, values, markers), c.dataType(), c.timeZoneId(), c.evalMode());
          }
          if (e instanceof EqualTo eq
              && eq.left() instanceof UnresolvedAttribute a
              && !ACTION.equalsIgnoreCase(a.nameParts().last())
              && eq.right() instanceof Literal l
              && l.dataType() instanceof StringType
              && l.value() != null) {
            return new EqualTo(eq.left(), parameter(l, values, markers));
          }
          return e;
        });
  }

  /** A marker in place of the parameter {@code l}: a value no other parameter has. */
  private static Literal parameter(Literal l, List<Literal> values, List<Literal> markers) {
    int i = markers.size();
    Object marker =
        l.dataType() instanceof StringType
            ? UTF8String.fromString("\u0000changelake parameter " + i)
            : l.dataType() == LongType$.MODULE$ ? (Object) (Long.MIN_VALUE + i) : (Object) (Integer.MIN_VALUE + i);
    Literal own = new Literal(marker, l.dataType());
    values.add(l);
    markers.add(own);
    return own;
  }

  private static boolean builtin(UnresolvedFunction f) {
    List<String> parts = CollectionConverters.asJava(f.nameParts());
    return parts.size() == 1
        && FunctionRegistry$.MODULE$.builtin().functionExists(FunctionIdentifier.apply(parts.get(0)));
  }

  /**
   * Replace by identity: the relations of reads (each read of one keeps its own attributes) and
   * expressions (parameters).
   */
  private static AbstractPartialFunction<LogicalPlan, LogicalPlan> replaced(
      Map<Object, BaseRelation> relations, Map<Object, Expression> expressions) {
    return everywhere(
        node -> {
          if (node instanceof LogicalRelation read && relations.containsKey(read.relation())) {
            return read.copy(
                relations.get(read.relation()), read.output(), read.catalogTable(),
                read.isStreaming(), read.stream());
          }
          if (expressions.isEmpty()) {
            return node;
          }
          return node.transformExpressionsUp(
              new AbstractPartialFunction<Expression, Expression>() {
                @Override
                public boolean isDefinedAt(Expression e) {
                  return expressions.containsKey(e);
                }

                @Override
                public Expression apply(Expression e) {
                  return expressions.get(e);
                }
              });
        });
  }

  /** A rule of a tree's transform that applies to every node. */
  private static <T> AbstractPartialFunction<T, T> everywhere(UnaryOperator<T> rule) {
    return new AbstractPartialFunction<>() {
      @Override
      public boolean isDefinedAt(T node) {
        return true;
      }

      @Override
      public T apply(T node) {
        return rule.apply(node);
      }
    };
  }
}
