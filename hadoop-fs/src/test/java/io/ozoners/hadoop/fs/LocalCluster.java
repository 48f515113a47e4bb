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
    }
    return instance;
  }

  /** Stops this cluster when the JVM exits. */
  public LocalCluster stopAtExit() {
    Runtime.getRuntime().addShutdownHook(new Thread(this::stop));
    return this;
  }

  private static LocalCluster start() throws IOException {
    return start("ozone.scm.block.size=1MB");
  }

  /** A cluster of its own (the benchmark's), with these `--set` values. */
  public static LocalCluster start(String... sets) throws IOException {
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
        new File(dir, "c").getAbsolutePath(), "--datanodes", "3", "--sidecars");
    for (String kv : sets) {
      pb.command().add("--set");
      pb.command().add(kv);
    }
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
    LocalCluster c = new LocalCluster(dir, p, om).stopAtExit();
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

  /** A process this test started (a datanode or a sidecar), with the arguments to start it again. */
  public final class Owned {
    public final String name;
    final List<String> args;
    final File ready;
    Process process;

    Owned(String name, List<String> args, File ready) {
      this.name = name;
      this.args = args;
      this.ready = ready;
    }

    /** Starts it (again) and waits until it is ready. */
    public Owned start() throws IOException {
      ready.delete();
      ProcessBuilder pb = new ProcessBuilder(args);
      pb.environment().remove("NODE_NAME");
      pb.redirectErrorStream(true);
      pb.redirectOutput(ProcessBuilder.Redirect.appendTo(new File(dir, name + ".log")));
      process = pb.start();
      long end = System.currentTimeMillis() + 60_000;
      while (!ready.exists()) {
        if (!process.isAlive() || System.currentTimeMillis() > end) {
          process.destroyForcibly();
          throw new IOException(name + " did not become ready; see " + new File(dir, name + ".log"));
        }
        sleep(50);
      }
      return this;
    }

    /** The `http=` address its ready file names (a sidecar's /metrics). */
    public String http() throws IOException {
      for (String w : new String(Files.readAllBytes(ready.toPath()), StandardCharsets.UTF_8).split("\\s+")) {
        if (w.startsWith("http=")) {
          return w.substring(5);
        }
      }
      throw new IOException(ready + " names no http address");
    }

    /** SIGKILL, and wait for it to be gone. */
    public void kill() throws IOException {
      process.destroyForcibly();
      try {
        if (!process.waitFor(30, TimeUnit.SECONDS)) {
          throw new IOException(name + " survived SIGKILL");
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new IOException(e);
      }
    }
  }

  private final List<Owned> owned = new ArrayList<>();

  private static void sleep(long ms) {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  private List<String> base(String... args) {
    List<String> a = new ArrayList<>();
    a.add(binary().getAbsolutePath());
    a.addAll(List.of(args));
    for (String kv : new String[] {"hdds.heartbeat.interval=1s", "ozone.scm.stale.node.interval=5s",
        "ozone.scm.dead.node.interval=15s", "ozone.domain.socket.path.skip.security.check=true"}) {
      a.add("--set");
      a.add(kv);
    }
    return a;
  }

  /** The short-circuit socket directory of node {@code node}. */
  public File socketDir(String node) {
    return new File(dir, "c/" + node + "/sockets");
  }

  /** A datanode of this test's own on {@code node} (not watched by `local up`). */
  public synchronized Owned datanode(String node) throws IOException {
    File d = new File(dir, "own-" + node);
    File sockets = socketDir(node);
    sockets.mkdirs();
    List<String> a = base("datanode", "--data-dir", new File(d, "data").getAbsolutePath(),
        "--metadata-dir", new File(d, "meta").getAbsolutePath(), "--grpc-addr", "127.0.0.1:0",
        "--http-addr", "127.0.0.1:0", "--om", om, "--node-name", node,
        "--ready-file", new File(d, "ready").getAbsolutePath(),
        "--set", "ozone.domain.socket.path=" + sockets.getAbsolutePath());
    Owned o = new Owned("datanode-" + node, a, new File(d, "ready"));
    owned.add(o);
    return o.start();
  }

  /** A sidecar of this test's own on {@code node}; its socket is {@code <dir>/sidecar.sock}. */
  public synchronized Owned sidecar(String node, String name, String... policyLines) throws IOException {
    File d = new File(dir, "s-" + name);
    d.mkdirs();
    File policy = new File(d, "sidecar.conf");
    Files.write(policy.toPath(), (String.join("\n", policyLines) + "\n").getBytes(StandardCharsets.UTF_8));
    List<String> a = base("sidecar", "--om", om, "--socket", new File(d, "sidecar.sock").getAbsolutePath(),
        "--passthrough-dir", new File(d, "sockets").getAbsolutePath(),
        "--domain-socket-dir", socketDir(node).getAbsolutePath(), "--http-addr", "127.0.0.1:0",
        "--conf", policy.getAbsolutePath(), "--node-name", node,
        "--ready-file", new File(d, "ready").getAbsolutePath());
    Owned o = new Owned("sidecar-" + name, a, new File(d, "ready"));
    owned.add(o);
    return o.start();
  }

  /** The socket of a sidecar started by {@link #sidecar}. */
  public File ownSidecarSocket(String name) {
    return new File(dir, "s-" + name + "/sidecar.sock");
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
    for (Owned o : owned) {
      if (o.process != null) {
        o.process.destroyForcibly();
      }
    }
    process.destroy();
    try {
      if (!process.waitFor(30, TimeUnit.SECONDS)) {
        process.destroyForcibly();
        process.waitFor(10, TimeUnit.SECONDS);
      }
    } catch (InterruptedException e) {
      process.destroyForcibly();
    }
    try (java.util.stream.Stream<java.nio.file.Path> files = Files.walk(dir.toPath())) {
      files.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    } catch (IOException | RuntimeException ignored) {
      // best effort: the cluster's directory under the temporary directory
    }
  }
}
