package io.ozoners.hadoop.fs;

import io.grpc.ManagedChannel;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.netty.shaded.io.netty.channel.EventLoopGroup;
import io.grpc.netty.shaded.io.netty.channel.epoll.EpollDomainSocketChannel;
import io.grpc.netty.shaded.io.netty.channel.epoll.EpollEventLoopGroup;
import io.grpc.netty.shaded.io.netty.channel.unix.DomainSocketAddress;
import io.ozoners.proto.SidecarDataError;
import io.ozoners.proto.OzoneManagerGrpc;
import io.ozoners.proto.SidecarGrpc;
import java.io.File;
import java.io.IOException;
import java.io.InterruptedIOException;
import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import org.newsclub.net.unix.AFUNIXSocketAddress;
import org.newsclub.net.unix.AFUNIXSocketChannel;

/**
 * What one JVM shares per sidecar socket: the gRPC channel (HTTP/2 over the
 * UNIX socket, one per socket per JVM, so a second FileSystem instance is
 * cheap), a pool of data-socket connections for reads through the sidecar,
 * and the pass-through relay connections to the node's datanodes.
 */
final class SidecarConnection {
  private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger(SidecarConnection.class);
  private static final Map<String, SidecarConnection> SHARED = new ConcurrentHashMap<>();
  private static final int MAX_IDLE_DATA = 64;

  final File socket;
  final File dataSocket;
  /** Pass-through relay directory, or null (reads go through the sidecar). */
  final File relayDir;
  final long backoffMillis;
  private final ManagedChannel channel;
  private final EventLoopGroup group;
  final SidecarGrpc.SidecarBlockingStub rpc;
  /** The OM's own service, which the sidecar passes on with the workload's credentials. */
  final OzoneManagerGrpc.OzoneManagerBlockingStub om;
  private final ArrayDeque<DataConn> idleData = new ArrayDeque<>();
  private final Map<String, RelayConnection> relays = new ConcurrentHashMap<>();
  private final Map<String, Long> relayBackoff = new ConcurrentHashMap<>();

  private SidecarConnection(File socket, File relayDir, long backoffMillis) {
    this.socket = socket;
    String name = socket.getName();
    int dot = name.lastIndexOf('.');
    this.dataSocket = new File(socket.getParentFile(), (dot > 0 ? name.substring(0, dot) : name) + ".data");
    this.relayDir = relayDir;
    this.backoffMillis = backoffMillis;
    this.group = new EpollEventLoopGroup(1, r -> {
      Thread t = new Thread(r, "ozrs-sidecar-" + socket.getName());
      t.setDaemon(true);
      return t;
    });
    this.channel = NettyChannelBuilder.forAddress(new DomainSocketAddress(socket))
        .eventLoopGroup(group)
        .channelType(EpollDomainSocketChannel.class)
        .usePlaintext()
        // The socket path is no valid HTTP/2 authority; the sidecar's
        // server refuses it.
        .overrideAuthority("localhost")
        .maxInboundMessageSize(64 << 20)
        .build();
    this.rpc = SidecarGrpc.newBlockingStub(channel);
    this.om = OzoneManagerGrpc.newBlockingStub(channel);
  }

  /** The shared connection to the sidecar on {@code socket}. */
  static SidecarConnection get(File socket, File relayDir, long backoffMillis) {
    String key = socket.getAbsolutePath() + "|" + (relayDir == null ? "" : relayDir.getAbsolutePath());
    return SHARED.computeIfAbsent(key, k -> new SidecarConnection(socket, relayDir, backoffMillis));
  }

  /** A stub with a deadline for one call. */
  SidecarGrpc.SidecarBlockingStub call() {
    return rpc.withDeadlineAfter(120, TimeUnit.SECONDS);
  }

  /** A namespace call (the OM's service through the sidecar) with a deadline. */
  OzoneManagerGrpc.OzoneManagerBlockingStub om() {
    return om.withDeadlineAfter(120, TimeUnit.SECONDS);
  }

  // ------------------------------------------------------------ pass-through

  /**
   * The relay connection to datanode {@code id} when its relay socket is
   * here (the datanode is on this node), or null.
   */
  RelayConnection relay(String id) {
    if (relayDir == null) {
      return null;
    }
    RelayConnection c = relays.get(id);
    if (c != null && !c.isDead()) {
      return c;
    }
    Long until = relayBackoff.get(id);
    if (until != null && System.currentTimeMillis() < until) {
      return null;
    }
    File path = new File(relayDir, "dn-" + id + ".sock");
    if (!path.exists()) {
      LOG.debug("no relay socket {}: datanode {} is not on this node", path, id);
      return null;
    }
    synchronized (relays) {
      c = relays.get(id);
      if (c != null && !c.isDead()) {
        return c;
      }
      try {
        c = RelayConnection.open(path, "ozrs-jvm");
        if (!id.equals(c.datanodeId)) {
          c.close();
          throw new IOException(path + " leads to datanode " + c.datanodeId);
        }
        relays.put(id, c);
        relayBackoff.remove(id);
        return c;
      } catch (IOException e) {
        LOG.warn("short-circuit to datanode {} through {} unavailable for {} ms: {}", id, path,
            backoffMillis, e.toString());
        backoff(id);
        return null;
      }
    }
  }

  /** No short-circuit to datanode {@code id} for the backoff interval. */
  void backoff(String id) {
    relayBackoff.put(id, System.currentTimeMillis() + backoffMillis);
  }

  // ------------------------------------------------------------- data socket

  /**
   * Reads {@code n} bytes at {@code offset} of open stream {@code handle}
   * into {@code dst} through the sidecar's data socket (the stream's verify
   * setting applies in the sidecar). Returns the bytes read (short only at
   * the end of the file).
   */
  int read(long handle, long offset, ByteBuffer dst, int n) throws IOException {
    IOException last = null;
    for (int attempt = 0; attempt < 2; attempt++) {
      DataConn c = takeData(attempt > 0);
      try {
        int got = c.read(handle, offset, dst, n);
        giveData(c);
        return got;
      } catch (SidecarError e) {
        giveData(c);
        throw e.toIOException(socket);
      } catch (IOException e) {
        closeQuietly(c.ch);
        last = e;
      }
    }
    throw new IOException("sidecar data socket " + dataSocket + ": " + last.getMessage(), last);
  }

  /**
   * A data-socket connection with its own request and header buffers, used
   * by one reader at a time: a read allocates nothing.
   */
  private static final class DataConn {
    final AFUNIXSocketChannel ch;
    /** Header plus a SidecarReadRequest: three varints of at most 10 bytes and their tags. */
    private final ByteBuffer req = ByteBuffer.allocateDirect(Frames.HEADER + 33);
    private final ByteBuffer hdr = ByteBuffer.allocateDirect(Frames.HEADER);

    DataConn(AFUNIXSocketChannel ch) {
      this.ch = ch;
    }

    int read(long handle, long offset, ByteBuffer dst, int n) throws IOException {
      req.clear().position(Frames.HEADER);
      // SidecarReadRequest{handle = 1, offset = 2, length = 3}, encoded by hand.
      field(1, handle);
      field(2, offset);
      field(3, n);
      int body = req.position() - Frames.HEADER;
      req.put(0, (byte) Frames.VERSION).put(1, (byte) Frames.CMD_SIDECAR_READ).putInt(2, body).flip();
      while (req.hasRemaining()) {
        ch.write(req);
      }
      hdr.clear();
      fill(ch, hdr);
      int version = hdr.get(0) & 0xff;
      int cmd = hdr.get(1) & 0xff;
      int len = hdr.getInt(2);
      if (version != Frames.VERSION || len < 0 || len > Frames.MAX_FRAME) {
        throw new IOException("bad frame from the sidecar data socket");
      }
      if (cmd == 0xff) {
        ByteBuffer e = ByteBuffer.allocate(len);
        fill(ch, e);
        throw new SidecarError(SidecarDataError.parseFrom(e.array()));
      }
      if (cmd != (Frames.CMD_SIDECAR_READ | Frames.RESPONSE) || len > n) {
        throw new IOException("unexpected reply from the sidecar data socket: command " + cmd + ", "
            + len + " bytes for a read of " + n);
      }
      int lim = dst.limit();
      dst.limit(dst.position() + len);
      try {
        fill(ch, dst);
      } finally {
        dst.limit(lim);
      }
      return len;
    }

    /** A varint field (wire type 0). */
    private void field(int number, long v) {
      req.put((byte) (number << 3));
      while ((v & ~0x7fL) != 0) {
        req.put((byte) ((v & 0x7f) | 0x80));
        v >>>= 7;
      }
      req.put((byte) v);
    }
  }

  private static void fill(AFUNIXSocketChannel ch, ByteBuffer b) throws IOException {
    while (b.hasRemaining()) {
      if (ch.read(b) < 0) {
        throw new IOException("sidecar closed the data connection");
      }
    }
  }

  private DataConn takeData(boolean fresh) throws IOException {
    if (!fresh) {
      synchronized (idleData) {
        DataConn c = idleData.pollFirst();
        if (c != null) {
          return c;
        }
      }
    }
    try {
      return new DataConn(AFUNIXSocketChannel.open(AFUNIXSocketAddress.of(dataSocket)));
    } catch (IOException e) {
      throw new IOException("cannot reach the sidecar at " + dataSocket + ": " + e.getMessage(), e);
    }
  }

  private void giveData(DataConn c) {
    synchronized (idleData) {
      if (idleData.size() < MAX_IDLE_DATA) {
        idleData.addFirst(c);
        return;
      }
    }
    closeQuietly(c.ch);
  }

  private static void closeQuietly(AutoCloseable c) {
    try {
      c.close();
    } catch (Exception ignored) {
      // closing
    }
  }

  /** After a failed call: connect again now, not after gRPC's backoff. */
  void reconnect() {
    channel.resetConnectBackoff();
    resetData();
  }

  /** Closes the pooled connections (after the sidecar restarted). */
  void resetData() {
    synchronized (idleData) {
      for (DataConn c : idleData) {
        closeQuietly(c.ch);
      }
      idleData.clear();
    }
  }

  static void sleep(long ms) throws InterruptedIOException {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new InterruptedIOException("interrupted");
    }
  }

  /** An error answer of the data socket (a gRPC status code and message). */
  static final class SidecarError extends IOException {
    private static final long serialVersionUID = 1L;
    final int code;

    SidecarError(SidecarDataError e) {
      super(e.getMessage());
      this.code = e.getCode();
    }

    IOException toIOException(File socket) {
      return Errors.fromCode(code, getMessage(), socket);
    }
  }
}
