package io.ozoners.hadoop.fs;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.hadoop.conf.Configuration;

/**
 * One real cluster for the whole test run: `ozone local up` from the
 * workspace's binary (an OM, 3 datanodes on node1..node3, and a sidecar on
 * each node and on a node without a datanode), a volume {@code vol} and a
 * file-system bucket {@code fsb}. Stopped by a shutdown hook.
 */
public final class LocalCluster {
  /** A sidecar's name, node, socket, pass-through directory and HTTP address. */
  public static final class Sidecar {
    public final String name;
    public final String node;
    public final File socket;
    public final File passthrough;
    public final String http;

    Sidecar(String name, String node, File socket, File passthrough, String http) {
      this.name = name;
      this.node = node;
      this.socket = socket;
      this.passthrough = passthrough;
      this.http = http;
    }
  }

  private static LocalCluster instance;

  public final File dir;
  public final String om;
  public final Map<String, Sidecar> sidecars = new LinkedHashMap<>();
  private final Process process;

  private LocalCluster(File dir, Process p, String om) {
    this.dir = dir;
    this.process = p;
    this.om = om;
  }

  /** The workspace's `ozone` binary (OZONE_BIN, else target/debug/ozone). */
  public static File binary() {
    String env = System.getenv("OZONE_BIN");
    if (env != null && !env.isEmpty()) {
      return new File(env);
    }
    String ws = System.getProperty("ozone.workspace", "..");
    return new File(ws, "target/debug/ozone");
  }

  /** The shared cluster, started on first use. */
  public static synchronized LocalCluster get() throws IOException {
    if (instance == null) {
      instance = start();
      LocalCluster c = instance;
      Runtime.getRuntime().addShutdownHook(new Thread(c::stop));
    }
    return instance;
  }

  private static LocalCluster start() throws IOException {
    File bin = binary();
    if (!bin.canExecute()) {
      throw new IOException(bin + " is missing: build the workspace first (cargo build)");
    }
    // Short: relay socket paths under it must fit in sun_path (108 bytes).
    File dir = new File(System.getProperty("java.io.tmpdir"),
        "oz-" + Long.toString(System.nanoTime() & 0xffffffL, 36));
    if (!dir.mkdirs()) {
      throw new IOException("cannot make " + dir);
    }
    ProcessBuilder pb = new ProcessBuilder(bin.getAbsolutePath(), "local", "up", "--dir",
        new File(dir, "c").getAbsolutePath(), "--datanodes", "3", "--sidecars",
        "--set", "ozone.scm.block.size=1MB", "--set", "ozone.client.bytes.per.checksum=16KB");
    pb.environment().remove("NODE_NAME");
    pb.environment().remove("OZONE_OM_ADDRESS");
    pb.redirectError(new File(dir, "local-up.log"));
    Process p = pb.start();
    BufferedReader out = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
    String om = null;
    List<Sidecar> scs = new ArrayList<>();
    long end = System.currentTimeMillis() + 120_000;
    while (scs.size() < 4) {
      String line = out.readLine();
      if (line == null || System.currentTimeMillis() > end) {
        p.destroyForcibly();
        throw new IOException("ozone local up stopped: " + new String(
            Files.readAllBytes(new File(dir, "local-up.log").toPath()), StandardCharsets.UTF_8));
      }
      if (line.startsWith("ready om=")) {
        om = line.substring("ready om=".length()).trim();
      } else if (line.startsWith("sidecar ")) {
        Map<String, String> kv = new LinkedHashMap<>();
        String[] parts = line.split(" ");
        for (int i = 2; i < parts.length; i++) {
          int eq = parts[i].indexOf('=');
          kv.put(parts[i].substring(0, eq), parts[i].substring(eq + 1));
        }
        scs.add(new Sidecar(parts[1], kv.get("node"), new File(kv.get("socket")),
            new File(kv.get("passthrough")), kv.get("http")));
      }
    }
    // Keep draining its output so it never blocks on a full pipe.
    Thread drain = new Thread(() -> {
      try {
        while (out.readLine() != null) {
          // nothing
        }
      } catch (IOException ignored) {
        // it stopped
      }
    });
    drain.setDaemon(true);
    drain.start();
    LocalCluster c = new LocalCluster(dir, p, om);
    for (Sidecar s : scs) {
      c.sidecars.put(s.node, s);
    }
    c.ozone("sh", "volume", "create", "/vol");
    c.ozone("sh", "bucket", "create", "--layout", "FILE_SYSTEM_OPTIMIZED", "/vol/fsb");
    return c;
  }

  /** Runs the `ozone` CLI against the cluster; returns its standard output. */
  public String ozone(String... args) throws IOException {
    List<String> cmd = new ArrayList<>();
    cmd.add(binary().getAbsolutePath());
    cmd.add("--om");
    cmd.add(om);
    cmd.addAll(List.of(args));
    ProcessBuilder pb = new ProcessBuilder(cmd);
    pb.environment().remove("NODE_NAME");
    File err = File.createTempFile("ozone-cli", ".err");
    pb.redirectError(err);
    Process p = pb.start();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    try {
      if (!p.waitFor(120, TimeUnit.SECONDS)) {
        p.destroyForcibly();
        throw new IOException("ozone " + String.join(" ", args) + " timed out");
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IOException(e);
    }
    String e = new String(Files.readAllBytes(err.toPath()), StandardCharsets.UTF_8);
    err.delete();
    if (p.exitValue() != 0) {
      throw new IOException("ozone " + String.join(" ", args) + " failed: " + e);
    }
    return out;
  }

  /** A configuration whose ozrs FileSystem talks to the sidecar of {@code node}. */
  public Configuration conf(String node) {
    Configuration conf = new Configuration();
    conf.set(OzrsFileSystem.SIDECAR_SOCKET, sidecars.get(node).socket.getAbsolutePath());
    conf.setBoolean("fs.ozrs.impl.disable.cache", true);
    return conf;
  }

  /** The node name of the sidecar that has no local datanode. */
  public String remoteNode() {
    for (String n : sidecars.keySet()) {
      if (!n.startsWith("node")) {
        return n;
      }
    }
    throw new IllegalStateException("no sidecar off the datanodes' nodes");
  }

  void stop() {
    process.destroy();
    try {
      if (!process.waitFor(30, TimeUnit.SECONDS)) {
        process.destroyForcibly();
      }
    } catch (InterruptedException e) {
      process.destroyForcibly();
    }
  }
}
