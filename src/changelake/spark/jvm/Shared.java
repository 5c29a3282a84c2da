package io.changelake.spark;

import java.io.Serializable;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.classic.SparkSession;

/**
 * Bytes the executors read: kept inline (serialized with each task) when small, else a
 * broadcast variable. Creating a broadcast costs the driver ~4 ms (its block manager stores and
 * serializes it), more than a statement's whole plan; a few kilobytes sent with each task cost
 * nothing measurable.
 */
final class Shared implements Serializable {
  private static final long serialVersionUID = 1L;
  /** Up to this many bytes travel with each task. */
  static final int INLINE_BYTES = 64 * 1024;

  private final byte[] inline;
  private final Broadcast<byte[]> broadcast;

  private Shared(byte[] inline, Broadcast<byte[]> broadcast) {
    this.inline = inline;
    this.broadcast = broadcast;
  }

  static Shared of(SparkSession spark, byte[] bytes) {
    if (bytes.length <= INLINE_BYTES) {
      return new Shared(bytes, null);
    }
    return new Shared(null, new JavaSparkContext(spark.sparkContext()).broadcast(bytes));
  }

  byte[] value() {
    return inline != null ? inline : broadcast.value();
  }
}
