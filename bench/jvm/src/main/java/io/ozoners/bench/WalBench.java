package io.ozoners.bench;

import java.io.IOException;
import java.io.PrintStream;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * HBase's WAL pattern, the same on every system, in one JVM: THREADS writers, each appending
 * 1 KiB entries to a file of its own and calling {@code hflush} after each. Reports appends per
 * second (each acknowledged by its hflush) and the 99th percentile of one append + hflush. The
 * systems take turns round by round, in the order A B B A A B ..., so that a machine that drifts
 * during the run favours neither; each round's ratio is taken against the other system's run
 * next to it.
 *
 * <p>Properties: {@code bench.wal.threads} (8), {@code bench.wal.seconds} (5), {@code
 * bench.wal.rounds} (3).
 */
final class WalBench {
  static final int ENTRY = 1024;
  static final int THREADS = Integer.getInteger("bench.wal.threads", 8);
  static final double SECONDS = Double.parseDouble(System.getProperty("bench.wal.seconds", "5"));
  static final int ROUNDS = Integer.getInteger("bench.wal.rounds", 3);
  static final String WORKLOAD = "wal-1k-hflush-" + THREADS + "t";

  /** One system: its FileSystem and the directory its files go in. */
  static final class Target {
    final FileSystem fs;
    final Path dir;

    Target(FileSystem fs, Path dir) {
      this.fs = fs;
      this.dir = dir;
    }
  }

  /** What one round of one system did. */
  static final class Round {
    final double opsPerSec;
    final double p99Ms;

    Round(double opsPerSec, double p99Ms) {
      this.opsPerSec = opsPerSec;
      this.p99Ms = p99Ms;
    }
  }

  private final PrintStream out;

  WalBench(PrintStream out) {
    this.out = out;
  }

  /** Runs ROUNDS rounds of every target (in turns) and prints results, medians and ratios. */
  void run(Map<String, Target> targets) throws Exception {
    List<String> names = new ArrayList<>(targets.keySet());
    Map<String, List<Round>> rounds = new LinkedHashMap<>();
    names.forEach(n -> rounds.put(n, new ArrayList<>()));
    for (String n : names) {
      once(targets.get(n), "warm", 1); // connections, classes, the first block
    }
    for (int r = 0; r < ROUNDS; r++) {
      List<String> order = new ArrayList<>(names);
      if (r % 2 == 1) {
        java.util.Collections.reverse(order);
      }
      for (String n : order) {
        Round x = once(targets.get(n), "r" + r, SECONDS);
        rounds.get(n).add(x);
        out.printf(
            "result system=%s mode=wal workload=%s unit=ops/s value=%.1f round=%d%n",
            n, WORKLOAD, x.opsPerSec, r);
        out.printf(
            "result system=%s mode=wal workload=%s-p99 unit=ms value=%.3f round=%d%n",
            n, WORKLOAD, x.p99Ms, r);
      }
    }
    for (String n : names) {
      double[] ops = rounds.get(n).stream().mapToDouble(x -> x.opsPerSec).sorted().toArray();
      double[] p99 = rounds.get(n).stream().mapToDouble(x -> x.p99Ms).sorted().toArray();
      out.printf(
          "median system=%s mode=wal workload=%s unit=ops/s value=%.1f%n",
          n, WORKLOAD, ops[ops.length / 2]);
      out.printf(
          "median system=%s mode=wal workload=%s-p99 unit=ms value=%.3f%n",
          n, WORKLOAD, p99[p99.length / 2]);
    }
    if (names.size() == 2) {
      double[] ratio = new double[ROUNDS];
      for (int r = 0; r < ROUNDS; r++) {
        ratio[r] = rounds.get(names.get(0)).get(r).opsPerSec / rounds.get(names.get(1)).get(r).opsPerSec;
      }
      Arrays.sort(ratio);
      out.printf(
          "ratio %s/%s workload=%s median=%.2f min=%.2f max=%.2f%n",
          names.get(0), names.get(1), WORKLOAD, ratio[ROUNDS / 2], ratio[0], ratio[ROUNDS - 1]);
    }
  }

  /** THREADS writers for {@code seconds}: appends/s and the p99 of append + hflush. */
  static Round once(Target t, String tag, double seconds) throws Exception {
    byte[] entry = new byte[ENTRY];
    Arrays.fill(entry, (byte) 'w');
    long[][] lat = new long[THREADS][];
    int[] count = new int[THREADS];
    Throwable[] failed = new Throwable[1];
    CountDownLatch start = new CountDownLatch(1);
    List<Thread> threads = new ArrayList<>();
    long[] window = new long[2];
    for (int i = 0; i < THREADS; i++) {
      int id = i;
      lat[i] = new long[1 << 20];
      Thread th =
          new Thread(
              () -> {
                Path p = new Path(t.dir, "wal-" + tag + "-" + id);
                try (FSDataOutputStream o = t.fs.create(p, true)) {
                  start.await();
                  long end = window[1];
                  int n = 0;
                  while (n < lat[id].length) {
                    long a = System.nanoTime();
                    if (a >= end) {
                      break;
                    }
                    o.write(entry);
                    o.hflush();
                    lat[id][n++] = System.nanoTime() - a;
                  }
                  count[id] = n;
                } catch (Throwable e) {
                  synchronized (failed) {
                    failed[0] = e;
                  }
                }
              });
      th.start();
      threads.add(th);
    }
    Thread.sleep(500); // every file created
    window[0] = System.nanoTime();
    window[1] = window[0] + (long) (seconds * 1e9);
    start.countDown();
    for (Thread th : threads) {
      th.join();
    }
    if (failed[0] != null) {
      throw new IOException("a WAL writer failed", failed[0]);
    }
    double elapsed = (System.nanoTime() - window[0]) / 1e9;
    int total = Arrays.stream(count).sum();
    long[] all = new long[total];
    int k = 0;
    for (int i = 0; i < THREADS; i++) {
      System.arraycopy(lat[i], 0, all, k, count[i]);
      k += count[i];
    }
    Arrays.sort(all);
    double p99 = all.length == 0 ? 0 : all[(int) Math.min(all.length - 1, all.length * 0.99)] / 1e6;
    for (int i = 0; i < THREADS; i++) {
      t.fs.delete(new Path(t.dir, "wal-" + tag + "-" + i), false);
    }
    return new Round(total / elapsed, p99);
  }
}
