package io.changelake.spark;

import java.util.Arrays;
import java.util.List;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.execution.datasources.FileIndex;
import org.apache.spark.sql.execution.datasources.PartitionDirectory;
import org.apache.spark.sql.types.StructType;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The files of a changelake read as the catalog knows them (path and size): a file index that
 * asks the file system nothing. Spark's own index lists every path it is given when a plan is
 * made, a status call per file; the catalog recorded each file's size when it committed it, and
 * a committed file never changes.
 */
final class KnownFiles implements FileIndex {
  private final FileStatus[] files;
  private final long bytes;

  /** {@code paths} and {@code sizes} (bytes) of the files, in the same order. */
  KnownFiles(List<Path> paths, long[] sizes) {
    files = new FileStatus[paths.size()];
    long total = 0;
    for (int i = 0; i < files.length; i++) {
      files[i] = new FileStatus(sizes[i], false, 1, sizes[i], 0L, paths.get(i));
      total += sizes[i];
    }
    bytes = total;
  }

  @Override
  public Seq<Path> rootPaths() {
    return CollectionConverters.asScala(
            Arrays.stream(files).map(FileStatus::getPath).toList())
        .toList();
  }

  @Override
  public Seq<PartitionDirectory> listFiles(Seq<Expression> partitionFilters, Seq<Expression> dataFilters) {
    return CollectionConverters.asScala(
            List.of(PartitionDirectory.apply(InternalRow.empty(), files)))
        .toList();
  }

  @Override
  public String[] inputFiles() {
    return Arrays.stream(files).map(f -> f.getPath().toString()).toArray(String[]::new);
  }

  @Override
  public void refresh() {}

  @Override
  public long sizeInBytes() {
    return bytes;
  }

  @Override
  public StructType partitionSchema() {
    return new StructType();
  }

  // two reads of the same files are one (a persisted plan is found by its equal)
  @Override
  public boolean equals(Object other) {
    return other instanceof KnownFiles known && Arrays.equals(known.files, files);
  }

  @Override
  public int hashCode() {
    return Arrays.hashCode(files);
  }
}
