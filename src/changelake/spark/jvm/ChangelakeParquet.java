package io.changelake.spark;

import java.io.Closeable;
import java.io.IOException;
import java.io.Serializable;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.datasources.FileIndex;
import org.apache.spark.sql.execution.datasources.FileStatusCache;
import org.apache.spark.sql.execution.datasources.HadoopFsRelation;
import org.apache.spark.sql.execution.datasources.InMemoryFileIndex;
import org.apache.spark.sql.execution.datasources.LogicalRelation$;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.execution.datasources.PartitionedFile;
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.unsafe.types.UTF8String;
import scala.Option;
import scala.collection.AbstractIterator;
import scala.collection.Iterator;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction1;

/**
 * Spark's Parquet file format with a table's deletion vectors and per-file constants applied
 * inside the reader: a scan of changelake's data files needs no join, no {@code _metadata}
 * struct and no per-row lookup of the row's file.
 *
 * <p>Per data file, a table (inline or broadcast, see {@link Shared}) holds a set of positions (the rows to skip) and four
 * BIGINT constants (base row id, the version that wrote the file, a tag, the table's ROW_ID mask).
 * The data schema may name virtual columns, which the reader fills without reading Parquet:
 * {@code _cl_file} (the file's name), {@code _cl_pos} (the row's position in the file),
 * {@code _cl_size} (the file's size), {@code _i_base}, {@code _i_version}, {@code _i_tag}
 * (the first three constants) and {@code _cl_row_hex}, the row's METADATA$ROW_ID: the hex
 * digits of its identity (the stored {@code _cl_row_id}, else base row id + position) XOR the
 * mask, written per batch into a {@link RowIdVector}. Columnar batches lose their skipped rows
 * by a selection over their vectors, batch by batch; the constants are constant vectors.
 * Spark's own reader does everything else: vectorized decoding, column pruning, filter
 * pushdown, row-group statistics.
 *
 * <p>The table is little-endian: per file, an int32 length and the UTF-8 name, an int64
 * mask (bit i: constant i is NULL; the sign bit: the positions are the rows to keep, not the
 * rows to skip, see {@link Late}; bit 62: they are no positions but the sorted key hashes an
 * index lookup looks for, see {@link Late#restrictToKeys}), the four int64 constants, an int32
 * count and that many int64 positions.
 */
public final class ChangelakeParquet extends ParquetFileFormat {
  private static final long serialVersionUID = 1L;

  static final String FILE = "_cl_file";
  static final String POS = "_cl_pos";
  static final String SIZE = "_cl_size";
  static final String ROW_HEX = "_cl_row_hex";
  // The materialized identity of a row written again (NULL: base row id + position).
  static final String STORED_ROW_ID = "_cl_row_id";
  // The column of a key → address index file its lookups restrict pages by (storage/index.py).
  static final String KEY_HASH = "_cl_key_h1";
  private static final long KEYS = 1L << 62;
  private static final int CONSTANTS = 4;
  private static final List<String> VIRTUAL =
      List.of(FILE, POS, SIZE, "_i_base", "_i_version", "_i_tag", ROW_HEX);
  private static final int HEX = VIRTUAL.indexOf(ROW_HEX);

  private final Shared table;
  private final boolean positions;
  // What equality compares: the table's content (two reads of the same state are one scan).
  private final String digest;
  // Whether a filter over the scan is evaluated in the reader first (ReaderCondition), and it.
  private final boolean late;
  private final ReaderCondition condition;

  /**
   * {@code positions}: whether any file of the table has a set of positions to apply;
   * {@code digest}: a digest of the table's bytes; {@code late}: a filter directly over the
   * scan is to be evaluated in the reader before the other columns are decoded ({@code
   * condition}, once {@link ReaderCondition#RULE} has put it here).
   */
  ChangelakeParquet(
      Shared table, boolean positions, String digest, boolean late, ReaderCondition condition) {
    this.table = table;
    this.positions = positions;
    this.digest = digest;
    this.late = late;
    this.condition = condition;
  }

  boolean late() {
    return late;
  }

  ReaderCondition condition() {
    return condition;
  }

  ChangelakeParquet withCondition(ReaderCondition condition) {
    return new ChangelakeParquet(table, positions, digest, late, condition);
  }

  /** Whether {@code name} is a column the reader makes rather than reads. */
  static boolean isVirtual(String name) {
    return VIRTUAL.contains(name)
        || name.equals(ParquetFileFormat.ROW_INDEX_TEMPORARY_COLUMN_NAME());
  }

  /**
   * The rows of the files {@code paths} (separated by newlines; each with a tab and its size in
   * bytes where the catalog knows it: then the file system is not asked) with the schema {@code schema}
   * (JSON: physical and virtual columns), each file as {@code table} says: a relation, not
   * analysed as a Dataset of its own (a statement's plan puts it in place and analyses the whole
   * once, {@link Frames#plan}); {@code late}: see the constructor.
   */
  static LogicalPlan relation(
      SparkSession spark, String paths, String schema, byte[] table, boolean positions,
      boolean late) {
    List<Path> roots = new ArrayList<>();
    List<Long> sizes = new ArrayList<>();
    for (String p : paths.split("\n")) {
      int tab = p.indexOf('\t');
      if (tab >= 0) {
        sizes.add(Long.parseLong(p.substring(tab + 1)));
        p = p.substring(0, tab);
      }
      if (!p.isEmpty()) {
        roots.add(new Path(p));
      }
    }
    StructType columns = (StructType) DataType.fromJson(schema);
    Shared shared = Shared.of(spark, table);
    String digest;
    try {
      digest = HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(table));
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e); // every Java platform has SHA-256
    }
    scala.collection.immutable.Map<String, String> none = scala.collection.immutable.Map$.MODULE$.empty();
    FileIndex index =
        sizes.size() == roots.size()
            ? new KnownFiles(roots, sizes.stream().mapToLong(Long::longValue).toArray())
            : new InMemoryFileIndex(
                spark,
                CollectionConverters.asScala(roots).toList(),
                none,
                Option.apply(columns),
                FileStatusCache.getOrCreate(spark),
                Option.empty(),
                Option.empty());
    HadoopFsRelation relation = new HadoopFsRelation(
        index, new StructType(), columns, Option.empty(),
        new ChangelakeParquet(shared, positions, digest, late, null), none, spark);
    return LogicalRelation$.MODULE$.apply(relation, false);
  }

  // Batches mix Spark's vectors, selections over them and constant vectors.
  @Override
  public Option<Seq<String>> vectorTypes(
      StructType requiredSchema, StructType partitionSchema, SQLConf sqlConf) {
    return Option.empty();
  }

  @Override
  public scala.Function1<PartitionedFile, Iterator<InternalRow>> buildReaderWithPartitionValues(
      org.apache.spark.sql.SparkSession spark,
      StructType dataSchema,
      StructType partitionSchema,
      StructType requiredSchema,
      Seq<Filter> filters,
      scala.collection.immutable.Map<String, String> options,
      Configuration hadoopConf) {
    List<StructField> inner = new ArrayList<>();
    int[] source = new int[requiredSchema.length()];
    boolean wantsPos = false;
    boolean wantsHex = false;
    int stored = -1;
    for (int i = 0; i < source.length; i++) {
      StructField f = requiredSchema.fields()[i];
      int virtual = VIRTUAL.indexOf(f.name());
      if (virtual < 0) {
        stored = f.name().equals(STORED_ROW_ID) ? inner.size() : stored;
        source[i] = inner.size();
        inner.add(f);
      } else {
        source[i] = -1 - virtual;
        wantsPos |= f.name().equals(POS);
        wantsHex |= virtual == HEX;
      }
    }
    if (wantsHex && stored < 0) {
      stored = inner.size();
      inner.add(storedRowId());
    }
    int index = -1;
    if (wantsPos || wantsHex || positions || condition != null) {
      index = inner.size();
      inner.add(rowIndex());
    }
    List<Filter> pushed = new ArrayList<>();
    for (Filter f : CollectionConverters.asJava(filters)) {
      boolean real = true;
      for (String r : f.references()) {
        real &= !VIRTUAL.contains(r);
      }
      if (real) {
        pushed.add(f);
      }
    }
    List<StructField> data = new ArrayList<>();
    for (StructField f : dataSchema.fields()) {
      if (!VIRTUAL.contains(f.name())) {
        data.add(f);
      }
    }
    StructType dataRead = new StructType(data.toArray(new StructField[0]));
    StructType innerRead = new StructType(inner.toArray(new StructField[0]));
    var read = reader(spark, dataRead, partitionSchema, innerRead, pushed, options, hadoopConf);
    boolean batches = "true".equals(options.getOrElse("returning_batch", () -> "false"));
    DataType[] types = new DataType[source.length];
    for (int i = 0; i < source.length; i++) {
      types[i] = requiredSchema.fields()[i].dataType();
    }
    Reader out = new Reader(read, table, source, index, wantsHex ? stored : -1, types, batches);
    if (condition == null) {
      return out;
    }
    // the condition's columns read first: of a file read from its start, every row in order,
    // so a row's position is its count (Spark's row index costs ~10 ns a row); of another
    // split of a file, with the row index
    StructType tested = condition.columns();
    var counted =
        reader(spark, dataRead, partitionSchema, tested, List.of(),
            options.updated("returning_batch", String.valueOf(super.supportBatch(spark, tested))),
            hadoopConf);
    tested = tested.add(rowIndex());
    var indexed =
        reader(spark, dataRead, partitionSchema, tested, pushed,
            options.updated("returning_batch", String.valueOf(super.supportBatch(spark, tested))),
            hadoopConf);
    return out.late(condition, counted, indexed, tested.length() - 1);
  }

  // Spark's reader broadcasts the Hadoop configuration it is given, serialized key by key (each
  // key's sources gzipped): a reader for the same schemas, filters and settings is taken from
  // the last ones made instead.
  private scala.Function1<PartitionedFile, Iterator<InternalRow>> reader(
      org.apache.spark.sql.SparkSession spark,
      StructType dataRead,
      StructType partitionSchema,
      StructType innerRead,
      List<Filter> pushed,
      scala.collection.immutable.Map<String, String> options,
      Configuration hadoopConf) {
    ReaderKey key =
        new ReaderKey(
            dataRead,
            partitionSchema,
            innerRead,
            pushed,
            options,
            settings(hadoopConf),
            ((org.apache.spark.sql.classic.SparkSession) spark).sessionState().conf().getAllConfs());
    scala.Function1<PartitionedFile, Iterator<InternalRow>> read;
    synchronized (READERS) {
      read = READERS.get(key);
    }
    if (read == null) {
      // a copy: Spark's reader sets the schema it reads in the configuration it broadcasts,
      // which a second reader of the same scan (ReaderCondition's) must not overwrite
      read =
          super.buildReaderWithPartitionValues(
              spark,
              dataRead,
              partitionSchema,
              innerRead,
              CollectionConverters.asScala(pushed).toList(),
              options,
              new Configuration(hadoopConf));
      synchronized (READERS) {
        READERS.put(key, read);
      }
    }
    return read;
  }

  /** What a reader of Spark's Parquet format is made of: equal keys make equal readers. */
  private record ReaderKey(
      StructType data,
      StructType partitions,
      StructType required,
      List<Filter> filters,
      scala.collection.immutable.Map<String, String> options,
      Map<String, String> hadoop,
      scala.collection.immutable.Map<String, String> session) {}

  private static final int READERS_KEPT = 64;
  private static final Map<ReaderKey, scala.Function1<PartitionedFile, Iterator<InternalRow>>>
      READERS =
          new LinkedHashMap<>(16, 0.75f, true) {
            @Override
            protected boolean removeEldestEntry(
                Map.Entry<ReaderKey, scala.Function1<PartitionedFile, Iterator<InternalRow>>> eldest) {
              return size() > READERS_KEPT;
            }
          };

  private static Map<String, String> settings(Configuration conf) {
    Map<String, String> all = new HashMap<>();
    for (Map.Entry<String, String> e : conf) {
      all.put(e.getKey(), e.getValue());
    }
    return all;
  }

  @Override
  public String shortName() {
    return "changelake";
  }

  @Override
  public String toString() {
    return condition == null
        ? "ChangelakeParquet"
        : "ChangelakeParquet(first " + condition.text() + ")";
  }

  // Two scans of the same files with different deletion vectors must not be taken for one;
  // two reads of the same files and table are one (a persisted or reused plan is found).
  @Override
  public boolean equals(Object other) {
    if (!(other instanceof ChangelakeParquet)) {
      return false;
    }
    ChangelakeParquet that = (ChangelakeParquet) other;
    return that.positions == positions
        && that.digest.equals(digest)
        && that.late == late
        && (condition == null
            ? that.condition == null
            : that.condition != null && that.condition.text().equals(condition.text()));
  }

  @Override
  public int hashCode() {
    return digest.hashCode();
  }

  // Spark asks this of the scan's schema, and the parent's reader asks it again of the schema it
  // is given (virtual columns out, the row index in): both must get the same answer.
  @Override
  public boolean supportBatch(org.apache.spark.sql.SparkSession spark, StructType schema) {
    List<StructField> read = new ArrayList<>();
    boolean hex = false;
    boolean stored = false;
    for (StructField f : schema.fields()) {
      hex |= f.name().equals(ROW_HEX);
      stored |= f.name().equals(STORED_ROW_ID);
      if (!VIRTUAL.contains(f.name())
          && !f.name().equals(ParquetFileFormat.ROW_INDEX_TEMPORARY_COLUMN_NAME())) {
        read.add(f);
      }
    }
    if (hex && !stored) {
      read.add(storedRowId());
    }
    read.add(rowIndex());
    return super.supportBatch(spark, new StructType(read.toArray(new StructField[0])));
  }

  private static StructField storedRowId() {
    return new StructField(STORED_ROW_ID, DataTypes.LongType, true, Metadata.empty());
  }

  private static StructField rowIndex() {
    // Spark's reader fills a column of this name with the rows' positions in the file.
    return new StructField(
        ParquetFileFormat.ROW_INDEX_TEMPORARY_COLUMN_NAME(),
        DataTypes.LongType,
        true,
        Metadata.empty());
  }

  /** What the table says about one data file. */
  private static final class FileEntry {
    final long mask;
    final long[] constants = new long[CONSTANTS];
    final long[] set; // null: no positions to skip
    // Whether the positions are the rows to keep (all others skipped), not the rows to skip.
    final boolean keep;
    // Whether the "positions" are the sorted key hashes a lookup looks for (nothing skipped).
    final boolean keys;
    final long[] sorted; // the positions at [1..n], sorted
    final int n;

    FileEntry(ByteBuffer in) {
      mask = in.getLong();
      for (int i = 0; i < CONSTANTS; i++) {
        constants[i] = in.getLong();
      }
      n = in.getInt();
      sorted = new long[n + 1];
      for (int i = 1; i <= n; i++) {
        sorted[i] = in.getLong();
      }
      keep = mask < 0;
      keys = (mask & KEYS) != 0;
      set = keys || (n == 0 && !keep) ? null : Positions.of(sorted, n);
    }

    boolean isNull(int constant) {
      return ((mask >>> constant) & 1) != 0;
    }
  }

  private static final class Reader
      extends AbstractFunction1<PartitionedFile, Iterator<InternalRow>> implements Serializable {
    private static final long serialVersionUID = 1L;

    private final scala.Function1<PartitionedFile, Iterator<InternalRow>> read;
    private final Shared table;
    private final int[] source;
    private final int index;
    private final int stored;
    private final DataType[] types;
    private final boolean batches;
    // a condition read and evaluated first (null: none): the reads of its columns, without
    // and with the row index (at `tested`)
    private final ReaderCondition condition;
    private final scala.Function1<PartitionedFile, Iterator<InternalRow>> counted;
    private final scala.Function1<PartitionedFile, Iterator<InternalRow>> indexed;
    private final int tested;
    private transient Map<String, Integer> offsets;

    Reader(scala.Function1<PartitionedFile, Iterator<InternalRow>> read, Shared table,
        int[] source, int index, int stored, DataType[] types, boolean batches) {
      this(read, table, source, index, stored, types, batches, null, null, null, -1);
    }

    private Reader(scala.Function1<PartitionedFile, Iterator<InternalRow>> read, Shared table,
        int[] source, int index, int stored, DataType[] types, boolean batches,
        ReaderCondition condition,
        scala.Function1<PartitionedFile, Iterator<InternalRow>> counted,
        scala.Function1<PartitionedFile, Iterator<InternalRow>> indexed,
        int tested) {
      this.read = read;
      this.table = table;
      this.source = source;
      this.index = index;
      this.stored = stored;
      this.types = types;
      this.batches = batches;
      this.condition = condition;
      this.counted = counted;
      this.indexed = indexed;
      this.tested = tested;
    }

    /**
     * This reader, evaluating {@code condition} first over its columns ({@code counted} reads
     * them, {@code indexed} with the row index at {@code tested} too), then decoding the rest
     * at the matches only.
     */
    Reader late(ReaderCondition condition,
        scala.Function1<PartitionedFile, Iterator<InternalRow>> counted,
        scala.Function1<PartitionedFile, Iterator<InternalRow>> indexed, int tested) {
      return new Reader(read, table, source, index, stored, types, batches, condition, counted,
          indexed, tested);
    }

    /** The sorted positions of {@code file} the condition keeps, less {@code skipped}. */
    private long[] matching(PartitionedFile file, long[] skipped) {
      boolean whole = file.start() == 0;
      @SuppressWarnings("unchecked")
      Iterator<Object> rows =
          (Iterator<Object>) (Iterator<?>) (whole ? counted : indexed).apply(file);
      try {
        org.apache.spark.TaskContext task = org.apache.spark.TaskContext.get();
        int partition = task == null ? 0 : task.partitionId();
        return ReaderCondition.matching(
            rows, whole ? -1 : tested, condition.predicate(partition), skipped);
      } finally {
        if (rows instanceof Closeable) {
          try {
            ((Closeable) rows).close();
          } catch (IOException e) {
            throw new java.io.UncheckedIOException(e);
          }
        }
      }
    }

    // Where each file's entry starts; an entry's positions are parsed when its file is read.
    private FileEntry entry(String name) {
      if (offsets == null) {
        Map<String, Integer> found = new HashMap<>();
        ByteBuffer in = ByteBuffer.wrap(table.value()).order(ByteOrder.LITTLE_ENDIAN);
        while (in.hasRemaining()) {
          byte[] bytes = new byte[in.getInt()];
          in.get(bytes);
          found.put(new String(bytes, StandardCharsets.UTF_8), in.position());
          in.position(in.position() + 8 * (1 + CONSTANTS));
          int n = in.getInt();
          in.position(in.position() + 8 * n);
        }
        offsets = found;
      }
      Integer at = offsets.get(name);
      if (at == null) {
        return null;
      }
      ByteBuffer in = ByteBuffer.wrap(table.value()).order(ByteOrder.LITTLE_ENDIAN);
      in.position(at);
      return new FileEntry(in);
    }

    @Override
    public Iterator<InternalRow> apply(PartitionedFile file) {
      String name = file.toPath().getName();
      FileEntry entry = entry(name);
      Object[] values = new Object[VIRTUAL.size()];
      values[0] = UTF8String.fromString(name);
      values[2] = file.fileSize();
      // The constants follow: values[HEX] is the mask, not a value of the column.
      for (int c = 0; c < CONSTANTS; c++) {
        values[3 + c] = entry == null || entry.isNull(c) ? null : entry.constants[c];
      }
      long[] set = entry == null ? null : entry.set;
      boolean keep = entry != null && entry.keep;
      long[] sorted = keep ? entry.sorted : null;
      int n = keep ? entry.n : 0;
      if (condition != null && !keep && !(entry != null && entry.keys)) {
        sorted = matching(file, set);
        n = (int) sorted[0];
        if (n == 0) {
          return scala.collection.Iterator$.MODULE$.empty();
        }
        set = Positions.of(sorted, n);
        keep = true;
      }
      RowIds ids =
          stored < 0 ? null : new RowIds(stored, index, (Long) values[3], (Long) values[HEX]);
      // Spark passes batches as an iterator of rows: the casts are unchecked, as Spark's own.
      @SuppressWarnings("unchecked")
      Iterator<Object> rows = (Iterator<Object>) (Iterator<?>) read.apply(file);
      if (keep) {
        Late.restrict(rows, sorted, n);
      } else if (entry != null && entry.keys) {
        Late.restrictToKeys(rows, entry.sorted, entry.n, KEY_HASH);
      }
      Iterator<?> out = batches
          ? new Batches(rows, source, index, set, keep, values, ids)
          : new Rows(rows, source, index, set, keep, values, ids, types);
      @SuppressWarnings("unchecked")
      Iterator<InternalRow> typed = (Iterator<InternalRow>) out;
      return typed;
    }
  }

  private static ConstantColumnVector constant(int rows, int virtual, Object value) {
    DataType type = virtual == 0 ? DataTypes.StringType : DataTypes.LongType;
    ConstantColumnVector v = new ConstantColumnVector(rows, type);
    if (value == null) {
      v.setNull();
    } else if (virtual == 0) {
      v.setUtf8String((UTF8String) value);
    } else {
      v.setLong((Long) value);
    }
    return v;
  }

  /**
   * How the rows of one file get their ROW_ID: the identity (the column {@code stored} of Spark's
   * rows, else the base row id plus the row index at {@code index}) XOR the mask; NULL where
   * neither the identity nor the mask is known, as the SQL form gives.
   */
  private static final class RowIds {
    private final int stored;
    private final int index;
    private final Long base;
    private final Long mask;

    RowIds(int stored, int index, Long base, Long mask) {
      this.stored = stored;
      this.index = index;
      this.base = base;
      this.mask = mask;
    }

    /** Fills {@code out} for rows {@code rows[0..n)} of the batch (rows 0..n when null). */
    void fill(RowIdVector out, ColumnarBatch batch, int[] rows, int n) {
      out.reset(n);
      ColumnVector ids = batch.column(stored);
      ColumnVector pos = batch.column(index);
      for (int i = 0; i < n; i++) {
        int r = rows == null ? i : rows[i];
        if (mask == null || (ids.isNullAt(r) && base == null)) {
          out.setNull(i);
        } else {
          long id = ids.isNullAt(r) ? base + pos.getLong(r) : ids.getLong(r);
          out.set(i, id ^ mask);
        }
      }
    }

    UTF8String of(InternalRow row) {
      if (mask == null || (row.isNullAt(stored) && base == null)) {
        return null;
      }
      long id = row.isNullAt(stored) ? base + row.getLong(index) : row.getLong(stored);
      return RowIdVector.of(id ^ mask);
    }
  }

  /** Spark's rows or batches of one file, converted, less what converts to nothing. */
  private abstract static class Selection<T> extends AbstractIterator<T> implements Closeable {
    final Iterator<Object> rows;
    final int[] source;
    final int index;
    final long[] set;
    final boolean keep;
    final Object[] values;
    final RowIds ids; // null: no ROW_ID asked for
    private T next;

    Selection(Iterator<Object> rows, int[] source, int index, long[] set, boolean keep,
        Object[] values, RowIds ids) {
      this.rows = rows;
      this.source = source;
      this.index = index;
      this.set = set;
      this.keep = keep;
      this.values = values;
      this.ids = ids;
    }

    // Spark closes a file's iterator when a scan stops early (a LIMIT, a failure) if it can:
    // pass that on to its reader, which closes itself only once read to the end.
    @Override
    public void close() throws IOException {
      if (rows instanceof Closeable) {
        ((Closeable) rows).close();
      }
    }

    /** What of {@code item} the scan returns, or null for nothing. */
    abstract T convert(Object item);

    final boolean kept(long position) {
      return set == null || Positions.contains(set, position) == keep;
    }

    @Override
    public boolean hasNext() {
      while (next == null && rows.hasNext()) {
        next = convert(rows.next());
      }
      return next != null;
    }

    @Override
    public T next() {
      if (!hasNext()) {
        throw new java.util.NoSuchElementException();
      }
      T out = next;
      next = null;
      return out;
    }
  }

  /** Spark's batches of one file, without the rows the file's set removes. */
  private static final class Batches extends Selection<ColumnarBatch> {
    private int[] selected = new int[0];
    private final RowIdVector hex = new RowIdVector();

    Batches(Iterator<Object> rows, int[] source, int index, long[] set, boolean keep,
        Object[] values, RowIds ids) {
      super(rows, source, index, set, keep, values, ids);
    }

    @Override
    ColumnarBatch convert(Object item) {
      ColumnarBatch batch = (ColumnarBatch) item;
      int n = batch.numRows();
      int kept = n;
      if (set != null) {
        if (selected.length < n) {
          selected = new int[n];
        }
        ColumnVector pos = batch.column(index);
        kept = 0;
        for (int i = 0; i < n; i++) {
          if (kept(pos.getLong(i))) {
            selected[kept++] = i;
          }
        }
        if (kept == 0) {
          return null;
        }
      }
      ColumnVector[] vectors = new ColumnVector[source.length];
      for (int j = 0; j < source.length; j++) {
        int s = source[j];
        int virtual = -1 - s;
        ColumnVector v;
        if (s >= 0 || virtual == 1) {
          v = batch.column(s >= 0 ? s : index);
          if (kept < n) {
            v = new SelectedVector(v, selected, kept);
          }
        } else if (virtual == HEX) {
          ids.fill(hex, batch, kept < n ? selected : null, kept);
          v = hex;
        } else {
          v = constant(kept, virtual, values[virtual]);
        }
        vectors[j] = v;
      }
      return new ColumnarBatch(vectors, kept);
    }
  }

  /** Spark's rows of one file (when it does not read batches), without the removed rows. */
  private static final class Rows extends Selection<InternalRow> {
    private final DataType[] types;
    private final GenericInternalRow out;

    Rows(Iterator<Object> rows, int[] source, int index, long[] set, boolean keep,
        Object[] values, RowIds ids, DataType[] types) {
      super(rows, source, index, set, keep, values, ids);
      this.types = types;
      this.out = new GenericInternalRow(source.length);
    }

    @Override
    InternalRow convert(Object item) {
      InternalRow row = (InternalRow) item;
      if (!kept(index < 0 ? 0 : row.getLong(index))) {
        return null;
      }
      for (int j = 0; j < source.length; j++) {
        int s = source[j];
        int virtual = -1 - s;
        if (s >= 0) {
          out.update(j, row.isNullAt(s) ? null : row.get(s, types[j]));
        } else if (virtual == 1) {
          out.update(j, row.getLong(index));
        } else if (virtual == HEX) {
          out.update(j, ids.of(row));
        } else {
          out.update(j, values[virtual]);
        }
      }
      return out;
    }
  }
}
