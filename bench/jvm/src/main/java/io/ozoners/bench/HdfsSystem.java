package io.ozoners.bench;

import java.io.File;
import java.io.IOException;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.hdfs.client.HdfsDataInputStream;

/**
 * HDFS for {@link FsBench}: a MiniDFSCluster of 3 datanodes in this JVM.
 * The modes are remote reads (over the datanodes' TCP data transfer
 * protocol) and the path-based local reader
 * ({@code dfs.client.use.legacy.blockreader.local}, the one that needs no
 * native library; the descriptor-passing reader needs libhadoop, which
 * Maven does not ship), each with verification on and off.
 */
final class HdfsSystem {
  private HdfsSystem() {}

  static Configuration conf(File base) {
    Configuration conf = new Configuration();
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, base.getAbsolutePath());
    conf.setLong("dfs.blocksize", 256L << 20);
    conf.setInt("dfs.replication", 3);
    // The datanodes serve block paths to this user (the local reader).
    conf.set("dfs.block.local-path-access.user", System.getProperty("user.name"));
    return conf;
  }

  /** Serves a 3-datanode cluster until the process is killed. */
  static void serve(File base, File uriFile) throws Exception {
    MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf(base)).numDataNodes(3).build();
    cluster.waitActive();
    java.nio.file.Files.writeString(
        uriFile.toPath(), cluster.getFileSystem().getUri().toString() + "\n");
    Thread.sleep(Long.MAX_VALUE);
  }

  static void run(File base) throws Exception {
    MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf(base)).numDataNodes(3).build();
    try {
      cluster.waitActive();
      FileSystem writer = cluster.getFileSystem();
      Path dir = new Path("/bench");
      List<Path> files = FsBench.write(writer, dir);
      Map<String, FileSystem> modes = new LinkedHashMap<>();
      for (boolean verify : new boolean[] {false, true}) {
        Configuration local = new Configuration(cluster.getConfiguration(0));
        local.setBoolean("dfs.client.read.shortcircuit", true);
        local.setBoolean("dfs.client.use.legacy.blockreader.local", true);
        local.setBoolean("dfs.client.read.shortcircuit.skip.checksum", !verify);
        // A client context (and its short-circuit settings) is shared by
        // every client of the same name: one per mode.
        local.set("dfs.client.context", "local-" + verify);
        FileSystem fs = FileSystem.newInstance(writer.getUri(), local);
        fs.setVerifyChecksum(verify);
        checkLocal(fs, files.get(0), true);
        modes.put("local-reader-verify-" + (verify ? "on" : "off"), fs);
      }
      for (boolean verify : new boolean[] {false, true}) {
        Configuration remote = new Configuration(cluster.getConfiguration(0));
        remote.setBoolean("dfs.client.read.shortcircuit", false);
        remote.set("dfs.client.context", "remote-" + verify);
        FileSystem fs = FileSystem.newInstance(writer.getUri(), remote);
        fs.setVerifyChecksum(verify);
        checkLocal(fs, files.get(0), false);
        modes.put("remote-verify-" + (verify ? "on" : "off"), fs);
      }
      new FsBench("hdfs", System.out).run(modes, files);
      for (FileSystem fs : modes.values()) {
        fs.close();
      }
    } finally {
      cluster.shutdown(true);
    }
  }

  /** Asserts that a read of {@code p} through {@code fs} is (or is not) short-circuit. */
  static void checkLocal(FileSystem fs, Path p, boolean local) throws IOException {
    try (FSDataInputStream in = fs.open(p)) {
      byte[] b = new byte[1 << 20];
      in.readFully(0, b);
      long sc = ((HdfsDataInputStream) in).getReadStatistics().getTotalShortCircuitBytesRead();
      if ((sc > 0) != local) {
        throw new IOException(
            "expected " + (local ? "" : "no ") + "short-circuit bytes, read " + sc);
      }
    }
  }
}
