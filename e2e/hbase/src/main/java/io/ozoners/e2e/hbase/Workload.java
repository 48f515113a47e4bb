package io.ozoners.e2e.hbase;

import java.io.BufferedWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.hbase.HBaseConfiguration;
import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.client.Admin;
import org.apache.hadoop.hbase.client.BufferedMutator;
import org.apache.hadoop.hbase.client.ColumnFamilyDescriptorBuilder;
import org.apache.hadoop.hbase.client.CompactionState;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.ConnectionFactory;
import org.apache.hadoop.hbase.client.Get;
import org.apache.hadoop.hbase.client.Put;
import org.apache.hadoop.hbase.client.RegionInfo;
import org.apache.hadoop.hbase.client.Result;
import org.apache.hadoop.hbase.client.ResultScanner;
import org.apache.hadoop.hbase.client.Scan;
import org.apache.hadoop.hbase.client.Table;
import org.apache.hadoop.hbase.client.TableDescriptorBuilder;
import org.apache.hadoop.hbase.util.Bytes;

/**
 * The HBase workload of the end-to-end scenario: every value it writes is a
 * function of its row number, so every read is checked. Each subcommand
 * prints one result line and exits non-zero on any mismatch.
 *
 * <pre>
 *   create TABLE REGIONS           create (pre-split)
 *   load TABLE ROWS REGIONS        create (pre-split), write, flush, major-compact
 *   verify TABLE ROWS GETS         full scan and random gets, every value compared
 *   gets TABLE ROWS THREADS SECS   random gets from THREADS threads for SECS seconds (checked)
 *   region-files TABLE ROW         the server of ROW's region, then its HFiles
 *   scan-region TABLE ROW ROWS     every row of ROW's region, values compared
 *   writer TABLE FIRST SECONDS OUT single puts until SECONDS pass; acknowledged rows to OUT
 *   check-acked TABLE FILE         every row in FILE is present with its value
 *   read-loop PATH SECONDS SHA256 [STOP]
 *                                  reads the file PATH whole, again and again, through one
 *                                  FileSystem for SECONDS seconds or until the local file
 *                                  STOP exists; every read must match SHA256
 * </pre>
 */
public final class Workload {
  static final byte[] FAMILY = Bytes.toBytes("f");
  static final byte[] QUALIFIER = Bytes.toBytes("v");
  static final int VALUE_BYTES = 100;

  private Workload() {}

  /** Row key of row {@code i}: a leading digit spreads rows over the pre-split regions. */
  static byte[] row(long i) {
    return Bytes.toBytes(String.format("%d%010d", i % 10, i));
  }

  static long rowNumber(byte[] key) {
    return Long.parseLong(Bytes.toString(key).substring(1));
  }

  /** The value of row {@code i}. */
  static byte[] value(long i) {
    byte[] v = new byte[VALUE_BYTES];
    SplittableRandom r = new SplittableRandom(i * 0x9E3779B97F4A7C15L + 17);
    for (int k = 0; k < v.length; k++) {
      v[k] = (byte) r.nextInt(256);
    }
    return v;
  }

  static void check(Result r, long i) throws IOException {
    byte[] got = r.getValue(FAMILY, QUALIFIER);
    if (got == null) {
      throw new IOException("row " + i + " is missing");
    }
    if (!Arrays.equals(got, value(i))) {
      throw new IOException("row " + i + " has a wrong value");
    }
  }

  public static void main(String[] args) throws Exception {
    Configuration conf = HBaseConfiguration.create();
    if (args[0].equals("read-loop")) {
      readLoop(conf, new org.apache.hadoop.fs.Path(args[1]), Integer.parseInt(args[2]), args[3],
          args.length > 4 ? Paths.get(args[4]) : null);
      return;
    }
    try (Connection c = ConnectionFactory.createConnection(conf)) {
      TableName t = TableName.valueOf(args[1]);
      switch (args[0]) {
        case "create":
          try (Admin admin = c.getAdmin()) {
            create(admin, t, Integer.parseInt(args[2]));
          }
          System.out.println("create: table " + t + " of " + args[2] + " regions");
          break;
        case "load":
          load(c, t, Long.parseLong(args[2]), Integer.parseInt(args[3]));
          break;
        case "verify":
          verify(c, t, Long.parseLong(args[2]), Integer.parseInt(args[3]));
          break;
        case "gets":
          gets(c, t, Long.parseLong(args[2]), Integer.parseInt(args[3]), Integer.parseInt(args[4]));
          break;
        case "region-files":
          regionFiles(c, conf, t, Long.parseLong(args[2]));
          break;
        case "scan-region":
          scanRegion(c, t, Long.parseLong(args[2]), Long.parseLong(args[3]));
          break;
        case "writer":
          writer(c, t, Long.parseLong(args[2]), Integer.parseInt(args[3]), Paths.get(args[4]));
          break;
        case "check-acked":
          checkAcked(c, t, Paths.get(args[2]));
          break;
        default:
          throw new IllegalArgumentException("unknown command " + args[0]);
      }
    }
  }

  /**
   * Reads {@code path} whole for {@code seconds} seconds or until {@code stop}
   * exists, each read's SHA-256 compared with {@code want}; a failed or
   * different read ends it with an error.
   */
  static void readLoop(
      Configuration conf, org.apache.hadoop.fs.Path path, int seconds, String want, Path stop)
      throws Exception {
    org.apache.hadoop.fs.FileSystem fs = path.getFileSystem(conf);
    byte[] buf = new byte[1 << 20];
    long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
    long reads = 0;
    long bytes = 0;
    long t0 = System.nanoTime();
    while (System.nanoTime() < end && (stop == null || !Files.exists(stop))) {
      java.security.MessageDigest md = java.security.MessageDigest.getInstance("SHA-256");
      try (org.apache.hadoop.fs.FSDataInputStream in = fs.open(path)) {
        int n;
        while ((n = in.read(buf)) > 0) {
          md.update(buf, 0, n);
          bytes += n;
        }
      }
      StringBuilder got = new StringBuilder();
      for (byte b : md.digest()) {
        got.append(String.format("%02x", b));
      }
      if (!got.toString().equals(want)) {
        throw new IOException("read " + (reads + 1) + " of " + path + " has SHA-256 " + got + ", want " + want);
      }
      reads++;
    }
    double secs = (System.nanoTime() - t0) / 1e9;
    System.out.printf("read-loop: %d reads, %d MiB in %.0f s, every one equal%n", reads, bytes >> 20, secs);
  }

  /** Creates {@code t} pre-split in {@code regions} regions, with no block cache. */
  static void create(Admin admin, TableName t, int regions) throws IOException {
    if (admin.tableExists(t)) {
      throw new IOException("table " + t + " exists already");
    }
    byte[][] splits = new byte[regions - 1][];
    for (int k = 1; k < regions; k++) {
      splits[k - 1] = Bytes.toBytes(String.valueOf(k * 10 / regions));
    }
    // No block cache: every get reads its data block from the file system.
    admin.createTable(
        TableDescriptorBuilder.newBuilder(t)
            .setColumnFamily(
                ColumnFamilyDescriptorBuilder.newBuilder(FAMILY).setBlockCacheEnabled(false).build())
            .build(),
        splits);
  }

  static void load(Connection c, TableName t, long rows, int regions) throws Exception {
    try (Admin admin = c.getAdmin()) {
      create(admin, t, regions);
      long t0 = System.nanoTime();
      try (BufferedMutator m = c.getBufferedMutator(t)) {
        for (long i = 0; i < rows; i++) {
          m.mutate(new Put(row(i)).addColumn(FAMILY, QUALIFIER, value(i)));
        }
      }
      double secs = (System.nanoTime() - t0) / 1e9;
      admin.flush(t);
      admin.majorCompact(t);
      long deadline = System.nanoTime() + TimeUnit.MINUTES.toNanos(5);
      // The compaction is queued asynchronously: wait until it has run.
      Thread.sleep(2000);
      while (admin.getCompactionState(t) != CompactionState.NONE) {
        if (System.nanoTime() > deadline) {
          throw new IOException("major compaction did not finish in 5 minutes");
        }
        Thread.sleep(500);
      }
      List<RegionInfo> rs = admin.getRegions(t);
      if (rs.size() != regions) {
        throw new IOException("expected " + regions + " regions, found " + rs.size());
      }
      // The compacted-away files leave the store when the discharger runs.
      Configuration conf = c.getConfiguration();
      for (RegionInfo ri : rs) {
        while (storeFiles(conf, t, ri).size() != 1) {
          if (System.nanoTime() > deadline) {
            throw new IOException(
                "region " + ri.getEncodedName() + " still has " + storeFiles(conf, t, ri));
          }
          Thread.sleep(500);
        }
      }
      System.out.printf(
          "load: %d rows in %d regions, %.0f rows/s, flushed and major-compacted%n",
          rows, rs.size(), rows / secs);
    }
  }

  static void verify(Connection c, TableName t, long rows, int gets) throws Exception {
    long seen = 0;
    long t0 = System.nanoTime();
    try (Table table = c.getTable(t);
        ResultScanner s = table.getScanner(new Scan().setCaching(1000))) {
      boolean[] found = new boolean[(int) rows];
      for (Result r : s) {
        long i = rowNumber(r.getRow());
        if (i < 0 || i >= rows || found[(int) i]) {
          throw new IOException("scan returned an unexpected or repeated row " + i);
        }
        check(r, i);
        found[(int) i] = true;
        seen++;
      }
      if (seen != rows) {
        throw new IOException("scan returned " + seen + " rows, expected " + rows);
      }
      double scanSecs = (System.nanoTime() - t0) / 1e9;
      SplittableRandom rnd = new SplittableRandom(42);
      long t1 = System.nanoTime();
      for (int k = 0; k < gets; k++) {
        long i = rnd.nextLong(rows);
        check(table.get(new Get(row(i))), i);
      }
      double getSecs = (System.nanoTime() - t1) / 1e9;
      // A row that was never written is absent.
      if (!table.get(new Get(row(rows + 1))).isEmpty()) {
        throw new IOException("a row that was never written is present");
      }
      System.out.printf(
          "verify: full scan %d rows (%.0f rows/s), %d random gets (%.0f gets/s), every value equal%n",
          seen, seen / scanSecs, gets, gets / getSecs);
    }
  }

  /** Random gets of rows below {@code rows} from {@code threads} threads, every value checked. */
  static void gets(Connection c, TableName t, long rows, int threads, int seconds)
      throws Exception {
    long[] done = new long[threads];
    Exception[] err = new Exception[1];
    long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
    List<Thread> ts = new ArrayList<>();
    long t0 = System.nanoTime();
    for (int k = 0; k < threads; k++) {
      final int id = k;
      Thread th =
          new Thread(
              () -> {
                SplittableRandom rnd = new SplittableRandom(1000 + id);
                try (Table table = c.getTable(t)) {
                  while (System.nanoTime() < end) {
                    long i = rnd.nextLong(rows);
                    check(table.get(new Get(row(i))), i);
                    done[id]++;
                  }
                } catch (Exception e) {
                  synchronized (err) {
                    err[0] = e;
                  }
                }
              });
      th.start();
      ts.add(th);
    }
    for (Thread th : ts) {
      th.join();
    }
    if (err[0] != null) {
      throw err[0];
    }
    double secs = (System.nanoTime() - t0) / 1e9;
    System.out.printf(
        "gets: %.0f gets/s from %d threads over %.1f s, every value equal%n",
        Arrays.stream(done).sum() / secs, threads, secs);
  }

  static RegionInfo regionOf(Admin admin, TableName t, byte[] key) throws IOException {
    for (RegionInfo ri : admin.getRegions(t)) {
      if (ri.containsRow(key)) {
        return ri;
      }
    }
    throw new IOException("no region holds " + Bytes.toString(key));
  }

  /** The files in region {@code ri}'s store of {@link #FAMILY}. */
  static List<FileStatus> storeFiles(Configuration conf, TableName t, RegionInfo ri)
      throws IOException {
    org.apache.hadoop.fs.Path root = new org.apache.hadoop.fs.Path(conf.get("hbase.rootdir"));
    org.apache.hadoop.fs.Path dir =
        new org.apache.hadoop.fs.Path(
            root,
            "data/" + t.getNamespaceAsString() + "/" + t.getQualifierAsString() + "/"
                + ri.getEncodedName() + "/" + Bytes.toString(FAMILY));
    List<FileStatus> out = new ArrayList<>();
    for (FileStatus st : dir.getFileSystem(conf).listStatus(dir)) {
      if (st.isFile()) {
        out.add(st);
      }
    }
    return out;
  }

  static void regionFiles(Connection c, Configuration conf, TableName t, long i) throws Exception {
    try (Admin admin = c.getAdmin();
        org.apache.hadoop.hbase.client.RegionLocator loc = c.getRegionLocator(t)) {
      System.out.println("server " + loc.getRegionLocation(row(i), true).getServerName());
      for (FileStatus st : storeFiles(conf, t, regionOf(admin, t, row(i)))) {
        System.out.println(st.getPath().toUri().getPath() + " " + st.getLen());
      }
    }
  }

  static void scanRegion(Connection c, TableName t, long i, long rows) throws Exception {
    try (Admin admin = c.getAdmin(); Table table = c.getTable(t)) {
      RegionInfo ri = regionOf(admin, t, row(i));
      long seen = 0;
      Scan scan =
          new Scan().withStartRow(ri.getStartKey()).withStopRow(ri.getEndKey()).setCacheBlocks(false);
      try (ResultScanner s = table.getScanner(scan)) {
        for (Result r : s) {
          check(r, rowNumber(r.getRow()));
          seen++;
        }
      }
      long expected = 0;
      for (long k = 0; k < rows; k++) {
        if (ri.containsRow(row(k))) {
          expected++;
        }
      }
      if (seen != expected) {
        throw new IOException("region scan returned " + seen + " rows, expected " + expected);
      }
      check(table.get(new Get(row(i))), i);
      System.out.printf(
          "scan-region: %d rows of region %s, every value equal%n", seen, ri.getEncodedName());
    }
  }

  /**
   * Single puts, each acknowledged one recorded; a put that fails is
   * counted and its row is not recorded. Prints how many failed.
   */
  static void writer(Connection c, TableName t, long first, int seconds, Path out) throws Exception {
    long acked = 0;
    long failed = 0;
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
    try (Table table = c.getTable(t);
        BufferedWriter w = Files.newBufferedWriter(out, StandardCharsets.UTF_8)) {
      for (long i = first; System.nanoTime() < deadline; i++) {
        try {
          table.put(new Put(row(i)).addColumn(FAMILY, QUALIFIER, value(i)));
          w.write(Long.toString(i));
          w.newLine();
          acked++;
          if (acked % 500 == 0) {
            w.flush();
          }
        } catch (IOException e) {
          failed++;
          System.err.println("put of row " + i + " failed: " + e);
        }
      }
    }
    System.out.printf("writer: %d acknowledged, %d failed%n", acked, failed);
  }

  static void checkAcked(Connection c, TableName t, Path file) throws Exception {
    List<Long> rows = new ArrayList<>();
    for (String l : Files.readAllLines(file, StandardCharsets.UTF_8)) {
      if (!l.isEmpty()) {
        rows.add(Long.parseLong(l));
      }
    }
    if (rows.isEmpty()) {
      throw new IOException(file + " holds no acknowledged row");
    }
    try (Table table = c.getTable(t)) {
      for (int k = 0; k < rows.size(); k += 1000) {
        List<Long> part = rows.subList(k, Math.min(rows.size(), k + 1000));
        List<Get> gets = new ArrayList<>(part.size());
        for (long i : part) {
          gets.add(new Get(row(i)));
        }
        Result[] rs = table.get(gets);
        for (int j = 0; j < rs.length; j++) {
          check(rs[j], part.get(j));
        }
      }
    }
    System.out.printf("check-acked: all %d acknowledged rows present with their values%n", rows.size());
  }
}
