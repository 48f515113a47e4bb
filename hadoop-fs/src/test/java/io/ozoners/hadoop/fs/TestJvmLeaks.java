package io.ozoners.hadoop.fs;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.junit.BeforeClass;
import org.junit.Test;

/** Applications that die with streams open leave nothing open in the sidecar. */
public class TestJvmLeaks {
  private static LocalCluster cluster;

  @BeforeClass
  public static void up() throws IOException {
    cluster = LocalCluster.get();
  }

  /** Child JVM: opens `n` streams of `path` through `socket`, reads a little of each, prints "open", waits. */
  public static void main(String[] args) throws Exception {
    Configuration conf = new Configuration();
    conf.set(OzrsFileSystem.SIDECAR_SOCKET, args[0]);
    // Through the sidecar only: no block descriptors in this JVM.
    conf.set(OzrsFileSystem.SHORT_CIRCUIT, "off");
    FileSystem fs = FileSystem.newInstance(URI.create("ozrs://t/"), conf);
    int n = Integer.parseInt(args[2]);
    List<FSDataInputStream> open = new ArrayList<>();
    byte[] b = new byte[100];
    for (int i = 0; i < n; i++) {
      FSDataInputStream in = fs.open(new Path(args[1]));
      in.readFully(i % 1000, b);
      open.add(in);
    }
    System.out.println("open " + open.size());
    System.out.flush();
    Thread.sleep(600_000);
  }

  @Test
  public void streamsOfKilledApplicationsAreClosed() throws Exception {
    LocalCluster.Owned sc = cluster.sidecar("node3", "leaky");
    String http = sc.http();
    String socket = cluster.ownSidecarSocket("leaky").getAbsolutePath();
    try (FileSystem fs = TestJvmFailures.fsOn(cluster.ownSidecarSocket("leaky"))) {
      TestJvmReads.write(fs, "/vol/fsb/jvm/leak.bin", TestJvmReads.data(20, 1 << 20));
      // 5 applications of 1,000 streams each, one after the other, each
      // SIGKILLed with its streams open: 5,000 in all, more than the
      // sidecar's 4,096 open streams.
      for (int app = 0; app < 5; app++) {
        String java = System.getProperty("java.home") + "/bin/java";
        ProcessBuilder pb = new ProcessBuilder(java, "-Xmx256m", "-cp", System.getProperty("java.class.path"),
            TestJvmLeaks.class.getName(), socket, "/vol/fsb/jvm/leak.bin", "1000");
        pb.redirectErrorStream(true);
        Process child = pb.start();
        BufferedReader r = new BufferedReader(new InputStreamReader(child.getInputStream(), StandardCharsets.UTF_8));
        StringBuilder seen = new StringBuilder();
        String line;
        while ((line = r.readLine()) != null && !line.startsWith("open ")) {
          seen.append(line).append('\n');
        }
        assertEquals("application " + app + " opened its streams: " + seen, "open 1000", line);
        child.destroyForcibly();
        assertTrue(child.waitFor(30, TimeUnit.SECONDS));
      }
      // Back to nothing open, and a fresh reader is served.
      long end = System.currentTimeMillis() + 20_000;
      long open = -1;
      while (System.currentTimeMillis() < end) {
        open = TestJvmReads.metric(http, "ozone_sidecar_open_streams");
        if (open == 0) {
          break;
        }
        Thread.sleep(100);
      }
      assertEquals("open streams after the applications died", 0, open);
      assertTrue("closed because their connections went",
          TestJvmReads.metric(http, "ozone_sidecar_streams_reaped_total{reason=\"connection\"}") >= 5000);
      try (FSDataInputStream in = fs.open(new Path("/vol/fsb/jvm/leak.bin"))) {
        byte[] b = new byte[1000];
        in.readFully(0, b);
      }
    } finally {
      sc.kill();
    }
  }
}
