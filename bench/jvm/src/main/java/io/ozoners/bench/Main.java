package io.ozoners.bench;

import java.io.File;
import java.net.URI;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * Runs {@link FsBench} against one system, in this JVM:
 *
 * <pre>
 *   ozrs URI      this project through the ozrs jar (URI: a directory on a
 *                 file-system bucket; the sidecar from the configuration or
 *                 OZONE_SIDECAR_SOCKET): short-circuit verify off and on,
 *                 and through the sidecar (no short-circuit)
 *   hdfs BASEDIR  HDFS: a MiniDFSCluster of 3 datanodes under BASEDIR;
 *                 remote reads and the path-based local reader, verify on
 *                 and off
 *   hdfs-serve BASEDIR URIFILE
 *                 HDFS for HBase: a MiniDFSCluster of 3 datanodes serving
 *                 until killed; its URI written to URIFILE once up
 *   wal OZRS_URI HDFS_URI
 *                 {@link WalBench} on both systems in turns: 1 KiB appends,
 *                 each followed by hflush, from 8 threads
 * </pre>
 */
public final class Main {
  private Main() {}

  public static void main(String[] args) throws Exception {
    switch (args[0]) {
      case "ozrs":
        ozrs(URI.create(args[1]));
        break;
      case "hdfs":
        HdfsSystem.run(new File(args[1]));
        break;
      case "hdfs-serve":
        HdfsSystem.serve(new File(args[1]), new File(args[2]));
        break;
      case "wal":
        wal(URI.create(args[1]), URI.create(args[2]));
        break;
      default:
        throw new IllegalArgumentException("unknown system " + args[0]);
    }
  }

  static void wal(URI ozrs, URI hdfs) throws Exception {
    Map<String, WalBench.Target> targets = new LinkedHashMap<>();
    targets.put(
        "ozone-rs", new WalBench.Target(FileSystem.newInstance(ozrs, new Configuration()), new Path(ozrs)));
    Configuration h = new Configuration();
    h.setInt("dfs.replication", 3);
    targets.put("hdfs", new WalBench.Target(FileSystem.newInstance(hdfs, h), new Path(hdfs)));
    for (WalBench.Target t : targets.values()) {
      t.fs.mkdirs(t.dir);
    }
    new WalBench(System.out).run(targets);
    for (WalBench.Target t : targets.values()) {
      t.fs.close();
    }
  }

  static void ozrs(URI dir) throws Exception {
    Configuration conf = new Configuration();
    FileSystem writer = FileSystem.newInstance(dir, conf);
    List<Path> files = FsBench.write(writer, new Path(dir));
    Map<String, FileSystem> modes = new LinkedHashMap<>();
    FileSystem off = FileSystem.newInstance(dir, conf);
    off.setVerifyChecksum(false);
    modes.put("short-circuit-verify-off", off);
    FileSystem on = FileSystem.newInstance(dir, conf);
    on.setVerifyChecksum(true);
    modes.put("short-circuit-verify-on", on);
    Configuration noSc = new Configuration(conf);
    noSc.set("ozone.client.read.short-circuit", "off");
    FileSystem viaSidecar = FileSystem.newInstance(dir, noSc);
    viaSidecar.setVerifyChecksum(true);
    modes.put("no-short-circuit-verify-on", viaSidecar);
    new FsBench("ozone-rs", System.out).run(modes, files);
    for (FileSystem fs : modes.values()) {
      fs.close();
    }
    writer.delete(new Path(dir), true);
    writer.close();
  }
}
