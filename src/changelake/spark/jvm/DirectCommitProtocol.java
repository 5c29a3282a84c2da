package io.changelake.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.List;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.JobContext;
import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.spark.internal.io.FileCommitProtocol.TaskCommitMessage;
import org.apache.spark.internal.io.FileNameSpec;
import org.apache.spark.internal.io.HadoopMapReduceCommitProtocol;
import scala.Option;
import scala.collection.immutable.Seq;

/**
 * Spark's file commit protocol for changelake's writes: each task writes its files where they
 * stay, with no staging directory and no renames, and the job commit does nothing.
 *
 * <p>A changelake write goes to a directory of its own statement, and its files become part of
 * a table only when the catalog commits the statement (the catalog is the commit protocol, as a
 * Delta log is Delta's): a file written by a failed job is never referenced. Spark's Hadoop
 * protocol stages every file and renames it twice, which on a one-row write costs more than the
 * job itself. A task that fails deletes what it wrote; each task attempt writes under a name of
 * its own.
 */
public class DirectCommitProtocol extends HadoopMapReduceCommitProtocol {
  private static final long serialVersionUID = 1L;

  private final String jobId;
  private final String path;
  private transient List<Path> written;

  public DirectCommitProtocol(String jobId, String path, boolean dynamicPartitionOverwrite) {
    super(jobId, path, dynamicPartitionOverwrite);
    if (dynamicPartitionOverwrite) {
      throw new UnsupportedOperationException("changelake writes never overwrite partitions");
    }
    this.jobId = jobId;
    this.path = path;
  }

  @Override
  public void setupJob(JobContext job) {
    Path out = new Path(path);
    try {
      out.getFileSystem(job.getConfiguration()).mkdirs(out);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  @Override
  public void commitJob(JobContext job, Seq<TaskCommitMessage> tasks) {}

  @Override
  public void abortJob(JobContext job) {}

  @Override
  public void setupTask(TaskAttemptContext task) {
    written = new ArrayList<>();
  }

  @Override
  public String newTaskTempFile(TaskAttemptContext task, Option<String> dir, FileNameSpec spec) {
    Path parent = dir.isDefined() ? new Path(path, dir.get()) : new Path(path);
    // the attempt's id is unique in the application: a retried task does not overwrite
    String name =
        String.format(
            "%spart-%05d-%s-%d%s",
            spec.prefix(),
            task.getTaskAttemptID().getTaskID().getId(),
            jobId,
            task.getTaskAttemptID().getId(),
            spec.suffix());
    Path file = new Path(parent, name);
    written.add(file);
    return file.toString();
  }

  @Override
  public String newTaskTempFileAbsPath(TaskAttemptContext task, String dir, FileNameSpec spec) {
    throw new UnsupportedOperationException("changelake writes no files outside their directory");
  }

  @Override
  public TaskCommitMessage commitTask(TaskAttemptContext task) {
    return new TaskCommitMessage(null);
  }

  @Override
  public void abortTask(TaskAttemptContext task) {
    for (Path file : written) {
      try {
        FileSystem fs = file.getFileSystem(task.getConfiguration());
        fs.delete(file, false);
      } catch (IOException e) {
        // the file was not created, or the directory is gone: nothing refers to it either way
      }
    }
  }
}
