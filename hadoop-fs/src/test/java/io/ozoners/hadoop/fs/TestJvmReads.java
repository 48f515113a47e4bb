package io.ozoners.hadoop.fs;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotEquals;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.RandomAccessFile;
import java.net.URI;
import java.net.URL;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.StreamCapabilities;
import org.junit.BeforeClass;
import org.junit.Test;

/** What the contract tests do not see: short-circuit, per-instance verification, leases, threads. */
public class TestJvmReads {
  private static LocalCluster cluster;

  @BeforeClass
  public static void up() throws IOException {
    cluster = LocalCluster.get();
  }

  static FileSystem fs(String node) throws IOException {
    return FileSystem.newInstance(URI.create("ozrs://t/"), cluster.conf(node));
  }

  static byte[] data(int seed, int n) {
    byte[] b = new byte[n];
    new Random(seed).nextBytes(b);
    return b;
  }

  static void write(FileSystem fs, String path, byte[] b) throws IOException {
    try (FSDataOutputStream out = fs.create(new org.apache.hadoop.fs.Path(path), true)) {
      out.write(b);
    }
  }

  static long metric(String http, String name) throws IOException {
    String text;
    try (java.io.InputStream in = new URL("http://" + http + "/metrics").openStream()) {
      text = new String(in.readAllBytes(), StandardCharsets.UTF_8);
    }
    long sum = 0;
    for (String line : text.split("\n")) {
      if (line.startsWith(name) && !line.startsWith("#")) {
        String[] p = line.trim().split(" ");
        sum += (long) Double.parseDouble(p[p.length - 1]);
      }
    }
    return sum;
  }

  @Test
  public void readsOfLocalBlocksGoShortCircuitAndMatch() throws Exception {
    byte[] b = data(1, 3 << 20);
    @SuppressWarnings("deprecation")
    FileSystem.Statistics st0 = FileSystem.getStatistics(OzrsFileSystem.SCHEME, OzrsFileSystem.class);
    long read0 = st0.getBytesRead();
    long written0 = st0.getBytesWritten();
    long ops0 = st0.getReadOps();
    try (FileSystem fs = fs("node1")) {
      write(fs, "/vol/fsb/jvm/sc.bin", b);
      try (FSDataInputStream in = fs.open(new org.apache.hadoop.fs.Path("/vol/fsb/jvm/sc.bin"))) {
        assertTrue(in.hasCapability(StreamCapabilities.PREADBYTEBUFFER));
        byte[] got = new byte[b.length];
        in.readFully(0, got);
        assertArrayEquals(b, got);
        ByteBuffer direct = ByteBuffer.allocateDirect(70_000);
        in.readFully(1_000_001, direct);
        direct.flip();
        for (int i = 0; i < 70_000; i++) {
          assertEquals(b[1_000_001 + i], direct.get(i));
        }
        OzrsInputStream s = (OzrsInputStream) in.getWrappedStream();
        assertEquals("one descriptor per block of the file", 3, s.localDescriptors());
        in.unbuffer();
        assertEquals(0, s.localDescriptors());
      }
      @SuppressWarnings("deprecation")
      FileSystem.Statistics st = FileSystem.getStatistics(OzrsFileSystem.SCHEME, OzrsFileSystem.class);
      assertTrue("bytes read are counted", st.getBytesRead() - read0 >= b.length + 70_000);
      assertTrue("bytes written are counted", st.getBytesWritten() - written0 >= b.length);
      assertTrue("read ops are counted", st.getReadOps() - ops0 >= 2);
    }
    assertTrue("the sidecar relayed a connection",
        metric(cluster.sidecars.get("node1").http, "ozone_sidecar_passthrough_connections") > 0);
  }

  @Test
  public void aDeletedFileIsNeverReadFromAHeldDescriptor() throws Exception {
    byte[] b = data(12, 1 << 20);
    org.apache.hadoop.fs.Path p = new org.apache.hadoop.fs.Path("/vol/fsb/jvm/deleted.bin");
    try (FileSystem fs = fs("node1")) {
      write(fs, p.toString(), b);
      try (FSDataInputStream in = fs.open(p)) {
        byte[] got = new byte[4096];
        in.readFully(0, got);
        OzrsInputStream s = (OzrsInputStream) in.getWrappedStream();
        assertEquals(1, s.localDescriptors());
        assertTrue(fs.delete(p, false));
        // The datanode deletes the block within a few seconds and clears
        // its slot first: from then on no read returns the block's bytes.
        long end = System.currentTimeMillis() + 30_000;
        IOException failed = null;
        while (failed == null && System.currentTimeMillis() < end) {
          try {
            in.readFully(0, got);
            assertArrayEquals(java.util.Arrays.copyOf(b, 4096), got);
            Thread.sleep(100);
          } catch (IOException e) {
            failed = e;
          }
        }
        assertTrue("reads fail once the block is deleted", failed != null);
        assertEquals("the invalidated descriptor was dropped", 0, s.localDescriptors());
      }
    }
  }

  @Test
  public void thePolicyHasTheLastWordOnVerification() throws Exception {
    LocalCluster.Owned sc = cluster.sidecar("node1", "strict", "ozone.client.verify.checksum = true",
        "ozone.sidecar.verify.override.allowed = false");
    try (FileSystem fs = TestJvmFailures.fsOn(cluster.ownSidecarSocket("strict"))) {
      fs.setVerifyChecksum(false);
      write(fs, "/vol/fsb/jvm/strict.bin", data(13, 100_000));
      try (FSDataInputStream in = fs.open(new org.apache.hadoop.fs.Path("/vol/fsb/jvm/strict.bin"))) {
        assertTrue("the policy refuses the override: the stream verifies",
            ((OzrsInputStream) in.getWrappedStream()).verifyChecksum());
      }
    } finally {
      sc.kill();
    }
  }

  /**
   * The root holds volumes and a volume holds buckets (what Hadoop's root-directory contract
   * tests cannot run against): both list, neither takes files, and nothing there is deleted or
   * made by a FileSystem call.
   */
  @Test
  public void theRootListsVolumesAndVolumesListBucketsButTakeNoFiles() throws Exception {
    try (FileSystem fs = fs("node1")) {
      org.apache.hadoop.fs.Path root = new org.apache.hadoop.fs.Path("/");
      org.apache.hadoop.fs.Path vol = new org.apache.hadoop.fs.Path("/vol");
      assertTrue(fs.getFileStatus(root).isDirectory());
      assertTrue(java.util.Arrays.stream(fs.listStatus(root))
          .anyMatch(s -> s.isDirectory() && s.getPath().getName().equals("vol")));
      assertTrue(java.util.Arrays.stream(fs.listStatus(vol))
          .anyMatch(s -> s.isDirectory() && s.getPath().getName().equals("fsb")));
      for (String p : new String[] {"/f", "/vol/f"}) {
        try {
          fs.create(new org.apache.hadoop.fs.Path(p)).close();
          fail("a file at " + p);
        } catch (org.apache.hadoop.fs.PathIOException e) {
          assertTrue(e.getMessage(), e.getMessage().contains("files live in buckets"));
        }
      }
      assertFalse("the root is never deleted", fs.delete(root, true));
      try {
        fs.delete(vol, true);
        fail("a volume deleted by the FileSystem");
      } catch (org.apache.hadoop.fs.PathIOException e) {
        assertTrue(e.getMessage(), e.getMessage().contains("ozone sh"));
      }
      try {
        fs.mkdirs(new org.apache.hadoop.fs.Path("/newvol"));
        fail("a volume made by the FileSystem");
      } catch (org.apache.hadoop.fs.PathIOException e) {
        assertTrue(e.getMessage(), e.getMessage().contains("ozone sh"));
      }
      assertTrue("mkdirs of an existing volume is a no-op", fs.mkdirs(vol));
      assertTrue(fs.exists(vol));
      assertFalse(fs.exists(new org.apache.hadoop.fs.Path("/newvol")));
    }
  }

  @Test
  public void listingsArePaged() throws Exception {
    try (FileSystem fs = fs("node1")) {
      org.apache.hadoop.fs.Path d = new org.apache.hadoop.fs.Path("/vol/fsb/jvm/many");
      int n = 2_345;
      for (int i = 0; i < n; i++) {
        fs.mkdirs(new org.apache.hadoop.fs.Path(d, String.format("d%05d", i)));
      }
      org.apache.hadoop.fs.RemoteIterator<org.apache.hadoop.fs.FileStatus> it = fs.listStatusIterator(d);
      int i = 0;
      while (it.hasNext()) {
        assertEquals(String.format("d%05d", i), it.next().getPath().getName());
        i++;
      }
      assertEquals(n, i);
      assertEquals(n, fs.listStatus(d).length);
      assertEquals(n + 1, fs.getContentSummary(d).getDirectoryCount());
    }
  }

  @Test
  public void theFileChecksumIsTheCrc32cOfTheBytes() throws Exception {
    byte[] b = data(11, (5 << 20) + 123);
    try (FileSystem fs = fs("node1")) {
      write(fs, "/vol/fsb/jvm/ck.bin", b);
      org.apache.hadoop.fs.FileChecksum c = fs.getFileChecksum(new org.apache.hadoop.fs.Path("/vol/fsb/jvm/ck.bin"));
      java.util.zip.CRC32C crc = new java.util.zip.CRC32C();
      crc.update(b);
      assertEquals("COMPOSITE-CRC32C", c.getAlgorithmName());
      byte[] want = java.nio.ByteBuffer.allocate(4).putInt((int) crc.getValue()).array();
      assertArrayEquals(want, c.getBytes());
      String cli = cluster.ozone("sh", "key", "checksum", "/vol/fsb/jvm/ck.bin");
      assertTrue(cli, cli.startsWith(String.format("CRC32C %08x %d ", crc.getValue(), b.length)));
    }
  }

  @Test
  public void aNodeWithoutDatanodeReadsThroughTheSidecar() throws Exception {
    byte[] b = data(2, 2 << 20);
    try (FileSystem w = fs("node1"); FileSystem r = fs(cluster.remoteNode())) {
      write(w, "/vol/fsb/jvm/remote.bin", b);
      try (FSDataInputStream in = r.open(new org.apache.hadoop.fs.Path("/vol/fsb/jvm/remote.bin"))) {
        byte[] got = new byte[b.length];
        in.readFully(0, got);
        assertArrayEquals(b, got);
        assertEquals(0, ((OzrsInputStream) in.getWrappedStream()).localDescriptors());
      }
    }
  }

  /**
   * Byte-at-a-time sequential reads (HBase's WAL reader) through the
   * sidecar are served from the stream's read-ahead buffer: one read per
   * 64 KiB, not one per byte; seeks and positional reads in between still
   * return the file's bytes.
   */
  @Test
  public void byteAtATimeReadsAreBuffered() throws Exception {
    byte[] b = data(9, (1 << 20) + 123);
    try (FileSystem w = fs("node1"); FileSystem r = fs(cluster.remoteNode())) {
      write(w, "/vol/fsb/jvm/bytes.bin", b);
      @SuppressWarnings("deprecation")
      FileSystem.Statistics st = FileSystem.getStatistics(OzrsFileSystem.SCHEME, OzrsFileSystem.class);
      try (FSDataInputStream in = r.open(new org.apache.hadoop.fs.Path("/vol/fsb/jvm/bytes.bin"))) {
        long ops0 = st.getReadOps();
        for (int i = 0; i < b.length; i++) {
          assertEquals("byte " + i, b[i] & 0xff, in.read());
        }
        assertEquals(-1, in.read());
        long ops = st.getReadOps() - ops0;
        assertTrue("one read per 64 KiB, not per byte: " + ops,
            ops <= b.length / OzrsInputStream.READ_AHEAD + 2);
        in.seek(70_000);
        byte[] small = new byte[100];
        in.readFully(small);
        assertArrayEquals(java.util.Arrays.copyOfRange(b, 70_000, 70_100), small);
        byte[] at = new byte[10];
        in.readFully(5, at);
        assertArrayEquals(java.util.Arrays.copyOfRange(b, 5, 15), at);
        assertEquals(b[70_100] & 0xff, in.read());
        in.unbuffer();
        assertEquals(b[70_101] & 0xff, in.read());
      }
    }
  }

  /** The block file of `path`'s first block on node1 (the writer's node holds the first replica). */
  static File blockFileOnNode1(FileSystem fs, String path, byte[] content) throws IOException {
    byte[] probe = java.util.Arrays.copyOfRange(content, 0, 4096);
    try (Stream<Path> files = Files.walk(new File(cluster.dir, "c/node1").toPath())) {
      for (Path p : files.filter(f -> f.toString().endsWith(".block")).collect(Collectors.toList())) {
        byte[] head = new byte[4096];
        try (RandomAccessFile raf = new RandomAccessFile(p.toFile(), "r")) {
          if (raf.length() >= 4096) {
            raf.readFully(head);
            if (java.util.Arrays.equals(head, probe)) {
              return p.toFile();
            }
          }
        }
      }
    }
    throw new IOException("no block file of " + path + " on node1");
  }

  @Test
  public void verificationIsPerInstance() throws Exception {
    byte[] b = data(3, 512 << 10);
    String path = "/vol/fsb/jvm/flip.bin";
    try (FileSystem verifying = fs("node1"); FileSystem trusting = fs("node1")) {
      trusting.setVerifyChecksum(false);
      write(verifying, path, b);
      File block = blockFileOnNode1(verifying, path, b);
      int at = 100_000;
      try (RandomAccessFile raf = new RandomAccessFile(block, "rw")) {
        raf.seek(at);
        raf.write(b[at] ^ 0x5a);
      }
      byte[] got = new byte[b.length];
      try (FSDataInputStream in = trusting.open(new org.apache.hadoop.fs.Path(path))) {
        assertFalse(((OzrsInputStream) in.getWrappedStream()).verifyChecksum());
        in.readFully(0, got);
      }
      assertEquals("the non-verifying instance returns what is on disk", (byte) (b[at] ^ 0x5a), got[at]);
      try (FSDataInputStream in = verifying.open(new org.apache.hadoop.fs.Path(path))) {
        assertTrue(((OzrsInputStream) in.getWrappedStream()).verifyChecksum());
        java.util.Arrays.fill(got, (byte) 0);
        in.readFully(0, got);
      }
      assertArrayEquals("the verifying instance falls back to a good replica", b, got);
    }
  }

  @Test
  public void sixtyFourThreadsReadOneStream() throws Exception {
    byte[] b = data(4, 4 << 20);
    try (FileSystem fs = fs("node1")) {
      write(fs, "/vol/fsb/jvm/threads.bin", b);
      try (FSDataInputStream in = fs.open(new org.apache.hadoop.fs.Path("/vol/fsb/jvm/threads.bin"))) {
        ExecutorService pool = Executors.newFixedThreadPool(64);
        List<Future<Integer>> fs64 = new ArrayList<>();
        for (int t = 0; t < 64; t++) {
          int seed = t;
          fs64.add(pool.submit(() -> {
            Random r = new Random(seed);
            ByteBuffer buf = ByteBuffer.allocateDirect(65536);
            int checked = 0;
            for (int i = 0; i < 100; i++) {
              int len = 1 + r.nextInt(65536);
              long pos = (long) r.nextInt(b.length - len);
              buf.clear().limit(len);
              in.readFully(pos, buf);
              for (int j = 0; j < len; j += 997) {
                if (buf.get(j) != b[(int) pos + j]) {
                  throw new AssertionError("thread " + seed + " read wrong data at " + (pos + j));
                }
              }
              checked++;
            }
            return checked;
          }));
        }
        int total = 0;
        for (Future<Integer> f : fs64) {
          total += f.get(120, TimeUnit.SECONDS);
        }
        pool.shutdown();
        assertEquals(6400, total);
      }
    }
  }

  /**
   * Child JVM: writes `bytes` to `path`, hsyncs (hflushes with a fourth argument "hflush"), writes
   * more without either, prints "synced", waits.
   */
  public static void main(String[] args) throws Exception {
    Configuration conf = new Configuration();
    conf.set(OzrsFileSystem.SIDECAR_SOCKET, args[0]);
    FileSystem fs = FileSystem.newInstance(URI.create("ozrs://t/"), conf);
    FSDataOutputStream out = fs.createNonRecursive(new org.apache.hadoop.fs.Path(args[1]), true, 4096,
        (short) 3, 1 << 20, null);
    byte[] b = data(5, Integer.parseInt(args[2]));
    out.write(b);
    if (args.length > 3 && args[3].equals("hflush")) {
      out.hflush();
    } else {
      out.hsync();
    }
    out.write(data(6, 1000));
    System.out.println("synced");
    System.out.flush();
    Thread.sleep(600_000);
  }

  @Test
  public void aKilledWriterJvmLeavesItsSyncedBytesForLeaseRecovery() throws Exception {
    killedWriterLeavesBytes("/vol/fsb/jvm/wal/wal.1", "hsync");
  }

  /** hflush, not hsync: the OM never heard the length; block recovery finds it on the replicas. */
  @Test
  public void aKilledWriterJvmLeavesItsFlushedBytesForLeaseRecovery() throws Exception {
    killedWriterLeavesBytes("/vol/fsb/jvm/wal/wal.2", "hflush");
  }

  private void killedWriterLeavesBytes(String path, String how) throws Exception {
    int synced = 300_000;
    try (FileSystem fs = fs("node1")) {
      fs.mkdirs(new org.apache.hadoop.fs.Path("/vol/fsb/jvm/wal"));
      String java = System.getProperty("java.home") + "/bin/java";
      ProcessBuilder pb = new ProcessBuilder(java, "-cp", System.getProperty("java.class.path"),
          TestJvmReads.class.getName(), cluster.sidecars.get("node1").socket.getAbsolutePath(), path,
          Integer.toString(synced), how);
      pb.redirectErrorStream(true);
      Process child = pb.start();
      BufferedReader r = new BufferedReader(new InputStreamReader(child.getInputStream(), StandardCharsets.UTF_8));
      String line;
      StringBuilder seen = new StringBuilder();
      while ((line = r.readLine()) != null && !line.equals("synced")) {
        seen.append(line).append('\n');
      }
      assertEquals("child JVM output: " + seen, "synced", line);
      // While the writer lives, a new reader sees every flushed byte.
      try (FSDataInputStream in = fs.open(new org.apache.hadoop.fs.Path(path))) {
        byte[] live = new byte[synced];
        in.readFully(0, live);
        assertArrayEquals(data(5, synced), live);
      }
      new ProcessBuilder("kill", "-9", Long.toString(child.pid())).start().waitFor();
      assertTrue(child.waitFor(30, TimeUnit.SECONDS));
      assertNotEquals(0, child.exitValue());
      org.apache.hadoop.fs.Path p = new org.apache.hadoop.fs.Path(path);
      assertFalse("still open after the kill", ((OzrsFileSystem) fs).isFileClosed(p));
      assertTrue(((OzrsFileSystem) fs).recoverLease(p));
      assertTrue(((OzrsFileSystem) fs).isFileClosed(p));
      assertEquals(synced, fs.getFileStatus(p).getLen());
      byte[] got = new byte[synced];
      try (FSDataInputStream in = fs.open(p)) {
        in.readFully(0, got);
        assertEquals(-1, in.read(synced, new byte[1], 0, 1));
      }
      assertArrayEquals(data(5, synced), got);
    }
  }
}
