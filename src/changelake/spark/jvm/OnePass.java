package io.changelake.spark;

import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.Job;
import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.hadoop.mapreduce.TaskID;
import org.apache.hadoop.mapreduce.TaskType;
import org.apache.hadoop.mapreduce.task.TaskAttemptContextImpl;
import org.apache.spark.SparkContext;
import org.apache.spark.TaskContext;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.QueryExecution;
import org.apache.spark.sql.execution.SQLExecution;
import org.apache.spark.sql.execution.datasources.OutputWriter;
import org.apache.spark.sql.execution.datasources.OutputWriterFactory;
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.SerializableConfiguration;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction0;
import scala.runtime.AbstractFunction2;
import scala.runtime.BoxedUnit;

/**
 * A delta's events applied in one pass: each task writes its new rows to a data file and its
 * deleted rows' positions (with their before-images) to a deletion-vector file, and counts its
 * events by kind and its deletes per data file as it goes. One job, no persisted events, no
 * write command to analyse and plan again, no second read of the events for the deletes.
 *
 * <p>The events are a plan of {@link Frames#plan} with four columns: {@code _k} (int: 0 an
 * insert, 1 a delete, 2 an event the plan could not compute, 3 another), {@code _u} (boolean:
 * the event is half of an update), {@code _d} (the new row as the data file holds it, NULL on
 * other events) and {@code _v} (the deleted row as the DV file holds it, its data file's name
 * and position first, NULL on other events). Only a plan run as small is written this way, by
 * one task (one file of each kind): the DV of a data file is one file.
 */
public final class OnePass {
  private static final String NONE = "0 0 0 0 0 0";
  private OnePass() {}

  /**
   * Write the events of {@code df} as described above into the directories {@code dataPath}
   * and {@code dvPath} (Parquet with the writer's {@code options}, "key=value" lines); null,
   * having written nothing, if its plan is not small. Returns the counts as text: one line
   * "unresolved deleting updatedAway inserting updating repeated(0/1)", then one line per data
   * file that lost rows: its name, a tab and how many positions were written for it.
   */
  public static String write(Dataset<Row> df, String dataPath, String dvPath, String options) {
    var classic = (org.apache.spark.sql.classic.Dataset<Row>) df;
    SparkSession spark = classic.sparkSession();
    String planned = spark.sessionState().conf().getConfString(Frames.PLANNED, "");
    if (!planned.startsWith("small ")) {
      return null;
    }
    StructType schema = classic.schema();
    StructType data = (StructType) schema.apply("_d").dataType();
    StructType dv = (StructType) schema.apply("_v").dataType();
    Map<String, String> writerOptions = new HashMap<>();
    for (String line : options.split("\n")) {
      int at = line.indexOf('=');
      if (at > 0) {
        writerOptions.put(line.substring(0, at), line.substring(at + 1));
      }
    }
    Output dataOut = Output.of(spark, data, dataPath, writerOptions);
    Output dvOut = Output.of(spark, dv, dvPath, writerOptions);
    String jobId = UUID.randomUUID().toString();
    QueryExecution qe = Frames.execution(df);
    SparkContext sc = spark.sparkContext();
    String[] results = new String[1];
    return Frames.labelled(
        sc,
        "changelake write",
        () ->
            SQLExecution.withNewExecutionId(
                qe,
                Option.apply("changelake write"),
                new AbstractFunction0<String>() {
                  @Override
                  public String apply() {
                    RDD<InternalRow> rdd = qe.toRdd();
                    if (rdd.getNumPartitions() == 0) { // no input: no events
                      return NONE;
                    }
                    if (rdd.getNumPartitions() != 1) { // one task: one file of each kind
                      rdd = rdd.coalesce(1, false, Option.empty(), null);
                    }
                    // the scheduler's own entry: SparkContext.runJob would clean and check the
                    // task's closure again (reading class files), what costs more than the job
                    sc.dagScheduler()
                        .runJob(
                            rdd,
                            new Task(jobId, dataOut, dvOut),
                            CollectionConverters.asScala(List.<Object>of(0)).toList(),
                            sc.getCallSite(),
                            new AbstractFunction2<Object, String, BoxedUnit>() {
                              @Override
                              public BoxedUnit apply(Object index, String result) {
                                results[0] = result;
                                return BoxedUnit.UNIT;
                              }
                            },
                            sc.localProperties().get());
                    return results[0] == null ? NONE : results[0];
                  }
                }));
  }

  /** Where and how a task writes the rows of one kind: Parquet of {@code schema} in {@code path}. */
  private record Output(
      String path, StructType schema, OutputWriterFactory factory, SerializableConfiguration conf)
      implements java.io.Serializable {
    static Output of(
        SparkSession spark, StructType schema, String path, Map<String, String> options) {
      Job job;
      try {
        job = Job.getInstance(spark.sessionState().newHadoopConf());
      } catch (IOException e) {
        throw new java.io.UncheckedIOException(e);
      }
      OutputWriterFactory factory =
          new ParquetFileFormat()
              .prepareWrite(spark, job, scala.collection.immutable.Map.from(
                  CollectionConverters.asScala(options)), schema);
      return new Output(
          path, schema, factory, new SerializableConfiguration(job.getConfiguration()));
    }

    OutputWriter open(String jobId, int partition) {
      TaskContext task = TaskContext.get();
      TaskAttemptID attempt =
          new TaskAttemptID(
              new TaskID(jobId, task.stageId(), TaskType.MAP, partition), task.attemptNumber());
      TaskAttemptContext context = new TaskAttemptContextImpl(conf.value(), attempt);
      // the attempt's number is in the name: a retried task does not overwrite
      String name =
          String.format(
              "part-%05d-%s-%d%s",
              partition, jobId, task.attemptNumber(), factory.getFileExtension(context));
      return factory.newInstance(new Path(path, name).toString(), schema, context);
    }
  }

  private static final class Task
      extends AbstractFunction2<TaskContext, scala.collection.Iterator<InternalRow>, String>
      implements java.io.Serializable {
    private static final long serialVersionUID = 1L;
    private final String jobId;
    private final Output dataOut;
    private final Output dvOut;

    Task(String jobId, Output dataOut, Output dvOut) {
      this.jobId = jobId;
      this.dataOut = dataOut;
      this.dvOut = dvOut;
    }

    @Override
    public String apply(TaskContext context, scala.collection.Iterator<InternalRow> rows) {
      try {
        return written(context.partitionId(), rows);
      } catch (IOException e) {
        throw new java.io.UncheckedIOException(e);
      }
    }

    private String written(int partition, scala.collection.Iterator<InternalRow> rows)
        throws IOException {
      long[] counts = new long[5]; // unresolved, deleting, updated away, inserting, updating
      Map<String, Set<Long>> deleted = new HashMap<>();
      Map<String, long[]> perFile = new HashMap<>();
      boolean repeated = false;
      OutputWriter dataWriter = null;
      OutputWriter dvWriter = null;
      List<OutputWriter> opened = new ArrayList<>();
      try {
        while (rows.hasNext()) {
          InternalRow row = rows.next();
          int kind = row.getInt(0);
          boolean update = !row.isNullAt(1) && row.getBoolean(1);
          if (kind == 2) {
            counts[0]++;
          } else if (kind == 1) {
            counts[1]++;
            counts[2] += update ? 1 : 0;
          } else if (kind == 0) {
            counts[3]++;
            counts[4] += update ? 1 : 0;
          }
          if (!row.isNullAt(2)) {
            if (dataWriter == null) {
              dataWriter = dataOut.open(jobId, partition);
              opened.add(dataWriter);
            }
            dataWriter.write(row.getStruct(2, dataOut.schema().length()));
          }
          if (!row.isNullAt(3)) {
            InternalRow gone = row.getStruct(3, dvOut.schema().length());
            String file = gone.getUTF8String(0).toString();
            repeated |= !deleted.computeIfAbsent(file, f -> new HashSet<>()).add(gone.getLong(1));
            perFile.computeIfAbsent(file, f -> new long[1])[0]++;
            if (dvWriter == null) {
              dvWriter = dvOut.open(jobId, partition);
              opened.add(dvWriter);
            }
            dvWriter.write(gone);
          }
        }
        for (OutputWriter w : opened) {
          w.close();
        }
      } catch (Throwable failed) {
        for (OutputWriter w : opened) {
          try {
            w.close();
          } catch (Throwable ignored) {
            // deleted below either way
          }
          Path file = new Path(w.path());
          try {
            file.getFileSystem(dataOut.conf().value()).delete(file, false);
          } catch (IOException ignored) {
            // a file no commit refers to; VACUUM sweeps it
          }
        }
        throw failed;
      }
      StringBuilder out = new StringBuilder();
      for (long n : counts) {
        out.append(n).append(' ');
      }
      out.append(repeated ? 1 : 0);
      for (Map.Entry<String, long[]> e : perFile.entrySet()) {
        out.append('\n').append(e.getKey()).append('\t').append(e.getValue()[0]);
      }
      return out.toString();
    }
  }
}
