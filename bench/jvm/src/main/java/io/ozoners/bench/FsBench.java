package io.ozoners.bench;

import java.io.EOFException;
import java.io.IOException;
import java.io.PrintStream;
import java.io.RandomAccessFile;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * One Hadoop FileSystem read workload, the same for every system: FILES
 * files of FILE_MIB MiB written with 3 replicas, then, round by round and
 * mode by mode, 64 KiB random positional reads with 16 threads (into direct
 * buffers where the stream reads into them, as HBase does) and a sequential
 * read of every file (1 MiB at a time). Each round also measures raw Java
 * {@code FileChannel} preads of a local file of the same size, the machine's
 * speed in that minute. Prints one {@code result} line per measurement and
 * the medians.
 *
 * <p>Properties: {@code bench.files} (4), {@code bench.mib} (256),
 * {@code bench.rounds} (3), {@code bench.seconds} (2).
 */
public final class FsBench {
  static final int READ = 64 << 10;
  static final int THREADS = 16;
  static final int FILES = Integer.getInteger("bench.files", 4);
  static final int FILE_MIB = Integer.getInteger("bench.mib", 256);
  static final int ROUNDS = Integer.getInteger("bench.rounds", 3);
  static final double SECONDS = Double.parseDouble(System.getProperty("bench.seconds", "2"));

  /** A positional reader of one of the files, shared by the threads. */
  interface Reader {
    void read(int file, long pos, ByteBuffer dst, byte[] heap) throws IOException;
  }

  private final String system;
  private final PrintStream out;
  private final Map<String, List<Double>> samples = new LinkedHashMap<>();

  FsBench(String system, PrintStream out) {
    this.system = system;
    this.out = out;
  }

  static long fileBytes() {
    return (long) FILE_MIB << 20;
  }

  /** Writes the files under {@code dir} with 3 replicas; returns their paths. */
  static List<Path> write(FileSystem fs, Path dir) throws IOException {
    List<Path> files = new ArrayList<>();
    byte[] buf = new byte[1 << 20];
    SplittableRandom r = new SplittableRandom(7);
    for (int f = 0; f < FILES; f++) {
      Path p = new Path(dir, "f" + f);
      try (FSDataOutputStream o = fs.create(p, true, 1 << 20, (short) 3, 256L << 20)) {
        for (int m = 0; m < FILE_MIB; m++) {
          for (int k = 0; k < buf.length; k += 8) {
            long v = r.nextLong();
            for (int b = 0; b < 8; b++) {
              buf[k + b] = (byte) (v >>> (8 * b));
            }
          }
          o.write(buf);
        }
      }
      if (fs.getFileStatus(p).getLen() != fileBytes()) {
        throw new IOException(p + " has the wrong length");
      }
      files.add(p);
    }
    return files;
  }

  /** Runs every mode ROUNDS times, interleaved, and prints the medians. */
  void run(Map<String, FileSystem> modes, List<Path> files) throws Exception {
    java.nio.file.Path local = Files.createTempFile("fsbench", ".raw");
    try {
      byte[] buf = new byte[1 << 20];
      try (RandomAccessFile f = new RandomAccessFile(local.toFile(), "rw")) {
        for (int m = 0; m < FILE_MIB; m++) {
          Arrays.fill(buf, (byte) m);
          f.write(buf);
        }
      }
      try (FileChannel ch = FileChannel.open(local)) {
        Reader raw = (file, pos, dst, heap) -> preadFully(ch, dst, pos);
        Map<String, FSDataInputStream[]> streams = new LinkedHashMap<>();
        for (Map.Entry<String, FileSystem> e : modes.entrySet()) {
          FSDataInputStream[] s = new FSDataInputStream[files.size()];
          for (int i = 0; i < s.length; i++) {
            s[i] = e.getValue().open(files.get(i));
          }
          streams.put(e.getKey(), s);
          sequential(e.getKey(), e.getValue(), files, false); // warm: into page cache
        }
        random("raw-pread", raw, 1, false);
        for (int round = 0; round < ROUNDS; round++) {
          random("raw-pread", raw, 1, true);
          for (Map.Entry<String, FSDataInputStream[]> e : streams.entrySet()) {
            FSDataInputStream[] s = e.getValue();
            boolean bb = s[0].hasCapability("in:preadbytebuffer");
            Reader r =
                (file, pos, dst, heap) -> {
                  if (bb) {
                    dst.clear();
                    s[file].readFully(pos, dst);
                  } else {
                    s[file].readFully(pos, heap, 0, READ);
                  }
                };
            random(e.getKey(), r, files.size(), true);
            sequential(e.getKey(), modes.get(e.getKey()), files, true);
          }
        }
        for (FSDataInputStream[] s : streams.values()) {
          for (FSDataInputStream i : s) {
            i.close();
          }
        }
      }
    } finally {
      Files.deleteIfExists(local);
    }
    out.println("== " + system + ": medians of " + ROUNDS + " rounds");
    for (Map.Entry<String, List<Double>> e : samples.entrySet()) {
      List<Double> v = new ArrayList<>(e.getValue());
      v.sort(Double::compare);
      out.printf("median system=%s %s value=%.1f%n", system, e.getKey(), v.get(v.size() / 2));
    }
  }

  static void preadFully(FileChannel ch, ByteBuffer dst, long pos) throws IOException {
    dst.clear();
    while (dst.hasRemaining()) {
      int n = ch.read(dst, pos + dst.position());
      if (n < 0) {
        throw new EOFException();
      }
    }
  }

  private void record(String mode, String workload, String unit, double v, boolean keep) {
    if (!keep) {
      return;
    }
    String k = "mode=" + mode + " workload=" + workload + " unit=" + unit;
    samples.computeIfAbsent(k, x -> new ArrayList<>()).add(v);
    out.printf("result system=%s %s value=%.1f%n", system, k, v);
  }

  private void random(String mode, Reader r, int files, boolean keep) throws Exception {
    long span = fileBytes() - READ;
    AtomicLong ops = new AtomicLong();
    CountDownLatch start = new CountDownLatch(1);
    List<Thread> ts = new ArrayList<>();
    Throwable[] err = new Throwable[1];
    long[] window = new long[2];
    for (int t = 0; t < THREADS; t++) {
      final int id = t;
      Thread th =
          new Thread(
              () -> {
                ByteBuffer dst = ByteBuffer.allocateDirect(READ);
                byte[] heap = new byte[READ];
                SplittableRandom rnd = new SplittableRandom(id * 31L + 1);
                try {
                  start.await();
                  long n = 0;
                  long end = window[1];
                  while (System.nanoTime() < end) {
                    r.read(rnd.nextInt(files), rnd.nextLong(span), dst, heap);
                    n++;
                  }
                  ops.addAndGet(n);
                } catch (Throwable e) {
                  synchronized (err) {
                    err[0] = e;
                  }
                }
              });
      th.start();
      ts.add(th);
    }
    window[0] = System.nanoTime();
    window[1] = window[0] + (long) (SECONDS * 1e9);
    start.countDown();
    for (Thread th : ts) {
      th.join();
    }
    if (err[0] != null) {
      throw new IOException(mode + ": random read failed", err[0]);
    }
    double secs = (System.nanoTime() - window[0]) / 1e9;
    record(mode, "random-64k-16t", "ops/s", ops.get() / secs, keep);
  }

  private void sequential(String mode, FileSystem fs, List<Path> files, boolean keep)
      throws IOException {
    byte[] buf = new byte[1 << 20];
    long t0 = System.nanoTime();
    long bytes = 0;
    for (Path p : files) {
      try (FSDataInputStream in = fs.open(p)) {
        for (int n; (n = in.read(buf)) > 0; ) {
          bytes += n;
        }
      }
    }
    if (bytes != files.size() * fileBytes()) {
      throw new IOException(mode + ": read " + bytes + " bytes sequentially");
    }
    double secs = (System.nanoTime() - t0) / 1e9;
    record(mode, "sequential-1m", "MiB/s", bytes / (1024.0 * 1024.0) / secs, keep);
  }
}
