package io.ozoners.hadoop.fs;

import io.ozoners.proto.KeyBlock;
import java.io.File;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.lang.management.ManagementFactory;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicLong;
import java.util.zip.CRC32C;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * The JVM read benchmark: 64 KiB random positional reads, 16 threads, into
 * direct buffers, through the ozrs jar (pass-through verify off and on, on
 * both with unaligned reads staged through one pread and read in place,
 * through the sidecar) beside raw Java {@code FileChannel} pread of the same
 * block files and pread + CRC32C of the same bytes, interleaved round by
 * round. Prints ops/s medians, ratios, bytes allocated per read (the threads'
 * own allocation counters) and the page-ins during the run. Run by
 * {@code hadoop-fs/bench.sh}.
 */
public final class JvmReadBench {
  static final int READ = 64 << 10;
  static final int THREADS = 16;

  interface Reader {
    void read(int thread, int file, long pos, ByteBuffer buf, CRC32C crc) throws IOException;
  }

  public static void main(String[] args) throws Exception {
    int files = Integer.parseInt(System.getProperty("bench.files", "16"));
    int mib = Integer.parseInt(System.getProperty("bench.mib", "64"));
    int rounds = Integer.parseInt(System.getProperty("bench.rounds", "5"));
    double seconds = Double.parseDouble(System.getProperty("bench.seconds", "2"));
    LocalCluster c = LocalCluster.start();
    Configuration conf = c.conf("node1");
    FileSystem w = FileSystem.newInstance(URI.create("ozrs://b/"), conf);
    FileSystem on = FileSystem.newInstance(URI.create("ozrs://b/"), conf);
    on.setVerifyChecksum(true);
    FileSystem off = FileSystem.newInstance(URI.create("ozrs://b/"), conf);
    off.setVerifyChecksum(false);
    Configuration noSc = new Configuration(conf);
    noSc.set(OzrsFileSystem.SHORT_CIRCUIT, "off");
    FileSystem viaSidecar = FileSystem.newInstance(URI.create("ozrs://b/"), noSc);
    viaSidecar.setVerifyChecksum(false);
    long size = (long) mib << 20;
    byte[] chunk = new byte[1 << 20];
    new Random(7).nextBytes(chunk);
    for (int f = 0; f < files; f++) {
      try (FSDataOutputStream out = w.create(new Path("/vol/fsb/bench/f" + f), true)) {
        for (long n = 0; n < size; n += chunk.length) {
          out.write(chunk);
        }
      }
    }
    FSDataInputStream[] onS = new FSDataInputStream[files];
    FSDataInputStream[] offS = new FSDataInputStream[files];
    FSDataInputStream[] scS = new FSDataInputStream[files];
    FileChannel[] raw = new FileChannel[files];
    List<File> blockFiles = new ArrayList<>();
    for (int f = 0; f < files; f++) {
      Path p = new Path("/vol/fsb/bench/f" + f);
      onS[f] = on.open(p);
      offS[f] = off.open(p);
      scS[f] = viaSidecar.open(p);
      List<KeyBlock> bl = ((OzrsInputStream) onS[f].getWrappedStream()).blocks();
      if (bl.size() != 1) {
        throw new IllegalStateException("each file must be one block, got " + bl.size());
      }
      KeyBlock kb = bl.get(0);
      File bf = new File(c.dir, "c/node1/data/containers/" + kb.getBlock().getContainerId() + "/chunks/"
          + kb.getBlock().getLocalId() + ".block");
      blockFiles.add(bf);
      raw[f] = new RandomAccessFile(bf, "r").getChannel();
    }
    Map<String, Reader> modes = new LinkedHashMap<>();
    modes.put("raw pread", (t, f, pos, buf, crc) -> {
      while (buf.hasRemaining()) {
        raw[f].read(buf, pos + buf.position());
      }
    });
    modes.put("raw pread + CRC32C", (t, f, pos, buf, crc) -> {
      while (buf.hasRemaining()) {
        raw[f].read(buf, pos + buf.position());
      }
      buf.flip();
      crc.reset();
      crc.update(buf);
    });
    modes.put("jar short-circuit, verify off", (t, f, pos, buf, crc) -> offS[f].readFully(pos, buf));
    modes.put("jar short-circuit, verify on", (t, f, pos, buf, crc) -> onS[f].readFully(pos, buf));
    modes.put("jar short-circuit, verify on (staged)", (t, f, pos, buf, crc) -> onS[f].readFully(pos, buf));
    modes.put("jar through the sidecar", (t, f, pos, buf, crc) -> scS[f].readFully(pos, buf));
    // Every mode's run is preceded by a raw pread run (and the verifying
    // ones also by a pread + CRC32C run): each ratio compares runs taken
    // side by side on this shared machine.
    Map<String, List<Double>> ops = new LinkedHashMap<>();
    Map<String, List<Double>> ofRaw = new LinkedHashMap<>();
    Map<String, List<Double>> ofCrc = new LinkedHashMap<>();
    Map<String, Double> allocPerRead = new LinkedHashMap<>();
    for (String m : modes.keySet()) {
      ops.put(m, new ArrayList<>());
      ofRaw.put(m, new ArrayList<>());
      ofCrc.put(m, new ArrayList<>());
    }
    long pageIns = 0;
    Reader rawReader = modes.get("raw pread");
    Reader crcReader = modes.get("raw pread + CRC32C");
    for (int r = 0; r <= rounds; r++) {
      for (Map.Entry<String, Reader> m : modes.entrySet()) {
        if (m.getKey().equals("raw pread")) {
          continue;
        }
        boolean verifying = m.getKey().contains("verify on");
        touch(blockFiles);
        long in0 = vmstat("pgpgin");
        double[] raw0 = run(rawReader, files, size, seconds);
        double[] crc0 = verifying ? run(crcReader, files, size, seconds) : null;
        LocalBlock.STAGED = m.getKey().endsWith("(staged)");
        double[] res = run(m.getValue(), files, size, seconds);
        long in1 = vmstat("pgpgin");
        if (r == 0) {
          continue; // warm-up round
        }
        pageIns += in1 - in0;
        ops.get("raw pread").add(raw0[0]);
        ofRaw.get("raw pread").add(1.0);
        allocPerRead.merge("raw pread", raw0[1], Math::max);
        ops.get(m.getKey()).add(res[0]);
        ofRaw.get(m.getKey()).add(res[0] / raw0[0]);
        if (crc0 != null) {
          ofCrc.get(m.getKey()).add(res[0] / crc0[0]);
        }
        allocPerRead.merge(m.getKey(), res[1], Math::max);
      }
    }
    LocalBlock.STAGED = false;
    StringBuilder json = new StringBuilder("{\n");
    System.out.printf("%-42s %10s %9s %16s %17s%n", "mode", "ops/s", "of pread", "of pread+CRC32C",
        "bytes alloc/read");
    for (String m : modes.keySet()) {
      double o = median(ops.get(m));
      double fr = median(ofRaw.get(m));
      double fc = ofCrc.get(m).isEmpty() ? Double.NaN : median(ofCrc.get(m));
      System.out.printf("%-42s %10.0f %9.2f %16s %17.1f%n", m, o, fr,
          Double.isNaN(fc) ? "" : String.format("%.2f", fc), allocPerRead.get(m));
      json.append(String.format("  \"%s\": {\"ops_per_s\": %.0f, \"of_pread\": %.3f, \"of_pread_crc32c\": %s, "
          + "\"bytes_allocated_per_read\": %.1f},%n", m, o, fr,
          Double.isNaN(fc) ? "null" : String.format("%.3f", fc), allocPerRead.get(m)));
    }
    System.out.printf("page-ins during the measured rounds: %d KiB (0: every read from the page cache)%n",
        pageIns);
    json.append(String.format("  \"page_ins_kib\": %d,%n  \"threads\": %d, \"read_bytes\": %d, \"files\": %d,"
        + " \"file_mib\": %d, \"rounds\": %d, \"seconds_per_run\": %.1f, \"java\": \"%s\"%n}%n", pageIns, THREADS,
        READ, files, mib, rounds, seconds, System.getProperty("java.version")));
    String out = System.getProperty("bench.json");
    if (out != null) {
      Files.write(new File(out).toPath(), json.toString().getBytes(StandardCharsets.UTF_8));
    }
    System.exit(0);
  }

  static double median(List<Double> v) {
    double[] a = v.stream().mapToDouble(Double::doubleValue).sorted().toArray();
    return a.length == 0 ? Double.NaN : a[a.length / 2];
  }

  /** Reads every block file once so the measured reads hit the page cache. */
  static void touch(List<File> files) throws IOException {
    ByteBuffer b = ByteBuffer.allocateDirect(1 << 20);
    for (File f : files) {
      try (FileChannel ch = new RandomAccessFile(f, "r").getChannel()) {
        long pos = 0;
        while (true) {
          b.clear();
          int n = ch.read(b, pos);
          if (n <= 0) {
            break;
          }
          pos += n;
        }
      }
    }
  }

  static long vmstat(String key) throws IOException {
    for (String line : Files.readAllLines(new File("/proc/vmstat").toPath())) {
      if (line.startsWith(key + " ")) {
        return Long.parseLong(line.substring(key.length() + 1).trim());
      }
    }
    return 0;
  }

  /** Runs one mode: {ops/s, most bytes allocated per read by a thread}. */
  static double[] run(Reader reader, int files, long size, double seconds) throws Exception {
    AtomicLong total = new AtomicLong();
    double[] alloc = new double[THREADS];
    CountDownLatch go = new CountDownLatch(1);
    Thread[] ts = new Thread[THREADS];
    Throwable[] err = new Throwable[1];
    long[] elapsed = new long[THREADS];
    com.sun.management.ThreadMXBean mx = (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
    for (int t = 0; t < THREADS; t++) {
      int id = t;
      ts[t] = new Thread(() -> {
        ByteBuffer buf = ByteBuffer.allocateDirect(READ);
        CRC32C crc = new CRC32C();
        ThreadLocalRandom rnd = ThreadLocalRandom.current();
        try {
          go.await();
          // Warm the thread (first reads open descriptors), then count.
          for (int i = 0; i < 50; i++) {
            buf.clear();
            reader.read(id, rnd.nextInt(files), rnd.nextLong(size - READ), buf, crc);
          }
          long a0 = mx.getThreadAllocatedBytes(Thread.currentThread().getId());
          long n = 0;
          long t0 = System.nanoTime();
          long end = t0 + (long) (seconds * 1e9);
          while (System.nanoTime() < end) {
            for (int i = 0; i < 16; i++) {
              buf.clear();
              reader.read(id, rnd.nextInt(files), rnd.nextLong(size - READ), buf, crc);
            }
            n += 16;
          }
          elapsed[id] = System.nanoTime() - t0;
          long a1 = mx.getThreadAllocatedBytes(Thread.currentThread().getId());
          alloc[id] = (double) (a1 - a0) / n;
          total.addAndGet(n);
        } catch (Throwable e) {
          err[0] = e;
        }
      });
      ts[t].start();
    }
    go.countDown();
    for (Thread t : ts) {
      t.join();
    }
    if (err[0] != null) {
      throw new RuntimeException(err[0]);
    }
    double secs = Arrays.stream(elapsed).max().getAsLong() / 1e9;
    return new double[] {total.get() / secs, Arrays.stream(alloc).max().getAsDouble()};
  }

  private JvmReadBench() {}
}
