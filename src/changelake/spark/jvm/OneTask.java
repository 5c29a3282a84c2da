package io.changelake.spark;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.CoalesceExec;
import org.apache.spark.sql.execution.ColumnarRule;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.exchange.ShuffleExchangeExec;
import scala.runtime.AbstractFunction1;
import scala.runtime.AbstractPartialFunction;
import scala.runtime.BoxedUnit;

/**
 * A session extension ({@code spark.sql.extensions}) that runs a small plan of {@link Frames}
 * (one shuffle partition) as one stage: every shuffle to one partition is replaced by a
 * coalesce of its input into one partition, which holds the same rows (all of them) without a
 * stage boundary, a shuffle write and a shuffle read. A join, an aggregate or a window over
 * one partition needs no exchange; the sorts they ask for stay in place.
 *
 * <p>The rule runs after Spark placed its exchanges (as a columnar rule's first step) and only
 * in the session of a plan {@link Frames#plan} marked small; every other plan is left as it is.
 * Planned as one task, a plan runs on one core: a small input's stages spent more in their
 * shuffles and scheduling than the second core saves (bench/ANALYSIS.md).
 */
public final class OneTask extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
  /** The configuration key that turns the rule off ("false"), e.g. to compare plans. */
  public static final String ENABLED = "spark.changelake.oneTask";

  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    extensions.injectColumnar(
        new AbstractFunction1<SparkSession, ColumnarRule>() {
          @Override
          public ColumnarRule apply(SparkSession session) {
            return new Columnar(session);
          }
        });
    return BoxedUnit.UNIT;
  }

  private static final class Columnar extends ColumnarRule {
    private final Rule<SparkPlan> rule;

    Columnar(SparkSession session) {
      this.rule = new Unshuffled(session);
    }

    @Override
    public Rule<SparkPlan> preColumnarTransitions() {
      return rule;
    }
  }

  private static final class Unshuffled extends Rule<SparkPlan> {
    private final SparkSession session;

    Unshuffled(SparkSession session) {
      this.session = session;
    }

    @Override
    public SparkPlan apply(SparkPlan plan) {
      String planned = session.conf().get(Frames.PLANNED, "");
      if (!planned.startsWith("small ") || session.conf().get(ENABLED, "true").equals("false")) {
        return plan;
      }
      return plan.transformUp(
          new AbstractPartialFunction<SparkPlan, SparkPlan>() {
            @Override
            public boolean isDefinedAt(SparkPlan node) {
              return node instanceof ShuffleExchangeExec exchange
                  && exchange.outputPartitioning().numPartitions() == 1;
            }

            @Override
            public SparkPlan apply(SparkPlan node) {
              return new CoalesceExec(1, ((ShuffleExchangeExec) node).child());
            }
          });
    }
  }
}
