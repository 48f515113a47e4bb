package io.ozoners.hadoop.fs;

import io.ozoners.proto.BlockData;
import io.ozoners.proto.BlockId;
import io.ozoners.proto.ScError;
import io.ozoners.proto.ScGetBlockRequest;
import io.ozoners.proto.ScGetBlockResponse;
import io.ozoners.proto.ScHandshakeRequest;
import io.ozoners.proto.ScHandshakeResponse;
import io.ozoners.proto.ScReleaseRequest;
import com.google.protobuf.ByteString;
import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import org.newsclub.net.unix.AFUNIXSocket;
import org.newsclub.net.unix.AFUNIXSocketAddress;

/**
 * One connection to a datanode's short-circuit socket through the sidecar's
 * pass-through relay: the handshake maps the datanode's slot segment
 * read-only; GetBlock hands over a block file's descriptor guarded by a
 * slot whose VALID bit the datanode clears when the block is deleted.
 * Requests on the connection are serialized; reads never touch it.
 */
final class RelayConnection implements AutoCloseable {
  private static final long SLOT_VALID = 1L << 63;
  private static final VarHandle LONGS =
      MethodHandles.byteBufferViewVarHandle(long[].class, ByteOrder.nativeOrder());

  final String datanodeId;
  final File path;
  private final AFUNIXSocket sock;
  private final InputStream in;
  private final OutputStream out;
  private final MappedByteBuffer slots;
  private final int slotSize;
  private final int slotCount;
  private volatile boolean dead;

  private RelayConnection(File path, AFUNIXSocket sock, ScHandshakeResponse hs, MappedByteBuffer slots)
      throws IOException {
    this.path = path;
    this.sock = sock;
    this.in = sock.getInputStream();
    this.out = sock.getOutputStream();
    this.datanodeId = hs.getDatanodeId();
    this.slots = slots;
    this.slotSize = hs.getSlotSize();
    this.slotCount = hs.getSlotCount();
  }

  /** Connects to the relay socket {@code path} and does the handshake. */
  static RelayConnection open(File path, String clientName) throws IOException {
    AFUNIXSocket sock = AFUNIXSocket.newInstance();
    try {
      sock.connect(AFUNIXSocketAddress.of(path), 5000);
      sock.setSoTimeout(10_000);
      sock.setAncillaryReceiveBufferSize(1024);
      Frames.send(sock.getOutputStream(), Frames.CMD_HANDSHAKE,
          ScHandshakeRequest.newBuilder().setClientName(clientName).build().toByteArray());
      Frames.Frame f = Frames.recv(sock, sock.getInputStream());
      if (f.cmd == Frames.CMD_ERROR) {
        Frames.closeAll(f.fds);
        throw new ShortCircuitRefused(ScError.parseFrom(f.body).getMessage());
      }
      if (f.cmd != (Frames.CMD_HANDSHAKE | Frames.RESPONSE) || f.fds.length != 1) {
        Frames.closeAll(f.fds);
        throw new IOException(path + ": unexpected handshake reply (command " + f.cmd + ")");
      }
      ScHandshakeResponse hs = ScHandshakeResponse.parseFrom(f.body);
      MappedByteBuffer map;
      try (FileInputStream seg = new FileInputStream(f.fds[0]);
          FileChannel ch = seg.getChannel()) {
        map = ch.map(FileChannel.MapMode.READ_ONLY, 0, (long) hs.getSlotCount() * hs.getSlotSize());
      }
      map.order(ByteOrder.nativeOrder());
      return new RelayConnection(path, sock, hs, map);
    } catch (IOException | RuntimeException e) {
      try {
        sock.close();
      } catch (IOException ignored) {
        // closing a failed connection
      }
      if (e instanceof IOException) {
        throw (IOException) e;
      }
      throw new IOException(path + ": " + e, e);
    }
  }

  boolean isDead() {
    return dead;
  }

  /**
   * Asks for the block file of {@code block}; returns the local block or
   * throws {@link ShortCircuitRefused} naming the datanode's reason.
   */
  synchronized LocalBlock getBlock(BlockId block, ByteString token) throws IOException {
    if (dead) {
      throw new IOException(path + ": connection closed");
    }
    try {
      Frames.send(out, Frames.CMD_GET_BLOCK,
          ScGetBlockRequest.newBuilder().setBlock(block).setToken(token).setWantFd(true).build()
              .toByteArray());
      Frames.Frame f = Frames.recv(sock, in);
      if (f.cmd == Frames.CMD_ERROR) {
        Frames.closeAll(f.fds);
        throw new ShortCircuitRefused(ScError.parseFrom(f.body).getMessage());
      }
      if (f.cmd != (Frames.CMD_GET_BLOCK | Frames.RESPONSE)) {
        Frames.closeAll(f.fds);
        throw new IOException(path + ": unexpected reply (command " + f.cmd + ")");
      }
      ScGetBlockResponse r = ScGetBlockResponse.parseFrom(f.body);
      if (!r.getGranted()) {
        Frames.closeAll(f.fds);
        throw new ShortCircuitRefused(r.getRefusal() + ": " + r.getReason());
      }
      if (f.fds.length != 1 || r.getSlot() >= slotCount) {
        Frames.closeAll(f.fds);
        throw new IOException(path + ": grant without a descriptor or with a bad slot");
      }
      BlockData data = r.getBlock();
      FileInputStream file = new FileInputStream(f.fds[0]);
      try {
        return new LocalBlock(this, r.getSlot(), block, data, file);
      } catch (IOException | RuntimeException e) {
        file.close();
        release(r.getSlot());
        throw e;
      }
    } catch (ShortCircuitRefused e) {
      throw e;
    } catch (IOException e) {
      kill();
      throw e;
    }
  }

  /** Gives a slot back (the block's descriptor is closed by the caller). */
  synchronized void release(int slot) {
    if (dead) {
      return;
    }
    try {
      Frames.send(out, Frames.CMD_RELEASE,
          ScReleaseRequest.newBuilder().setSlot(slot).build().toByteArray());
      Frames.Frame f = Frames.recv(sock, in);
      Frames.closeAll(f.fds);
    } catch (IOException e) {
      kill();
    }
  }

  /** Whether {@code slot} is VALID and still names the block. */
  boolean valid(int slot, long container, long local) {
    if (dead) {
      return false;
    }
    int at = slot * slotSize;
    long w0 = (long) LONGS.getAcquire(slots, at);
    if ((w0 & SLOT_VALID) == 0) {
      return false;
    }
    return (long) LONGS.get(slots, at + 8) == container && (long) LONGS.get(slots, at + 16) == local;
  }

  private void kill() {
    dead = true;
    try {
      sock.close();
    } catch (IOException ignored) {
      // already broken
    }
  }

  @Override
  public void close() {
    kill();
  }

  /** A refusal by the datanode or the relay: this read goes through the sidecar. */
  static final class ShortCircuitRefused extends IOException {
    private static final long serialVersionUID = 1L;

    ShortCircuitRefused(String m) {
      super(m);
    }
  }

}
