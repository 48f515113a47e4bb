package io.ozoners.hadoop.fs;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;

import java.io.IOException;
import java.net.URI;
import java.nio.ByteBuffer;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.junit.BeforeClass;
import org.junit.Test;

/** Processes dying under an open FileSystem: a datanode mid-read, a sidecar between calls. */
public class TestJvmFailures {
  private static LocalCluster cluster;

  @BeforeClass
  public static void up() throws IOException {
    cluster = LocalCluster.get();
  }

  static FileSystem fsOn(java.io.File socket) throws IOException {
    Configuration conf = new Configuration();
    conf.set(OzrsFileSystem.SIDECAR_SOCKET, socket.getAbsolutePath());
    return FileSystem.newInstance(URI.create("ozrs://t/"), conf);
  }

  /**
   * A datanode of its own on node9 holds the first replica (the writer is on
   * node9) and serves the reader's first blocks short-circuit; it is
   * SIGKILLed after a quarter of the file: the read goes on through the
   * sidecar from the other replicas and ends bit-exact.
   */
  @Test
  public void aDatanodeKilledMidReadLeavesTheReadBitExact() throws Exception {
    LocalCluster.Owned dn = cluster.datanode("node9");
    LocalCluster.Owned sc = cluster.sidecar("node9", "node9-own");
    byte[] b = TestJvmReads.data(9, 12 << 20);
    try (FileSystem fs = fsOn(cluster.ownSidecarSocket("node9-own"))) {
      TestJvmReads.write(fs, "/vol/fsb/jvm/dnkill.bin", b);
      try (FSDataInputStream in = fs.open(new Path("/vol/fsb/jvm/dnkill.bin"))) {
        OzrsInputStream s = (OzrsInputStream) in.getWrappedStream();
        ByteBuffer buf = ByteBuffer.allocateDirect(b.length);
        ByteBuffer piece = buf.duplicate();
        int step = 256 << 10;
        boolean killed = false;
        for (int at = 0; at < b.length; at += step) {
          if (!killed && at >= b.length / 4) {
            assertTrue("node9's blocks were read short-circuit before the kill", s.localDescriptors() > 0);
            dn.kill();
            killed = true;
          }
          piece.limit(at + step).position(at);
          in.readFully(at, piece);
        }
        assertTrue(killed);
        byte[] got = new byte[b.length];
        buf.get(got);
        assertArrayEquals(b, got);
      }
    } finally {
      dn.start();
      sc.kill();
    }
  }

  /** A sidecar SIGKILLed and started again under an open FileSystem and an open stream. */
  @Test
  public void aRestartedSidecarIsReconnected() throws Exception {
    LocalCluster.Owned sc = cluster.sidecar("node2", "node2-own");
    byte[] b = TestJvmReads.data(10, 3 << 20);
    try (FileSystem fs = fsOn(cluster.ownSidecarSocket("node2-own"))) {
      TestJvmReads.write(fs, "/vol/fsb/jvm/screstart.bin", b);
      FSDataInputStream in = fs.open(new Path("/vol/fsb/jvm/screstart.bin"));
      byte[] got = new byte[b.length];
      in.readFully(0, got, 0, 1 << 20);
      sc.kill();
      sc.start();
      assertEquals(b.length, fs.getFileStatus(new Path("/vol/fsb/jvm/screstart.bin")).getLen());
      // The stream's handle died with the old sidecar: reads reopen it.
      in.unbuffer();
      in.readFully(1 << 20, got, 1 << 20, b.length - (1 << 20));
      in.close();
      assertArrayEquals(b, got);
      sc.kill();
      IOException e = null;
      long t0 = System.nanoTime();
      long saved = Rpc.retryMillis;
      Rpc.retryMillis = 2_000;
      try {
        fs.getFileStatus(new Path("/vol/fsb/jvm/screstart.bin"));
      } catch (IOException x) {
        e = x;
      } finally {
        Rpc.retryMillis = saved;
      }
      assertTrue("a dead sidecar is an IOException", e != null);
      assertTrue("it names the socket: " + e.getMessage(),
          e.getMessage().contains(cluster.ownSidecarSocket("node2-own").getPath()));
      assertTrue("it gave up after the retry time", (System.nanoTime() - t0) / 1_000_000 < 20_000);
    }
  }
}
