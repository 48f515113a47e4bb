package io.ozoners.hadoop.fs;

import com.google.protobuf.ByteString;
import io.ozoners.proto.SidecarCommitRequest;
import io.ozoners.proto.SidecarWriteRequest;
import java.io.IOException;
import java.io.OutputStream;
import org.apache.hadoop.fs.FSExceptionMessages;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.StreamCapabilities;
import org.apache.hadoop.fs.Syncable;

/**
 * A file being written through the sidecar: bytes are buffered and sent in
 * pieces; {@code hflush} sends what is buffered and returns when every
 * replica holds it and readers that open the file afterwards see it (the
 * sidecar's Hflush: nothing fsynced, the OM not called); {@code hsync} also
 * has every replica fsync it and the OM record the length (the sidecar's
 * Hsync); {@code close} commits.
 */
final class OzrsOutputStream extends OutputStream implements Syncable, StreamCapabilities {
  private static final int BUFFER = 1 << 20;

  private final SidecarConnection conn;
  private final long handle;
  private final FileSystem.Statistics stats;
  private final String name;
  private final byte[] buf = new byte[BUFFER];
  private int buffered;
  private boolean closed;

  OzrsOutputStream(SidecarConnection conn, long handle, FileSystem.Statistics stats, String name) {
    this.conn = conn;
    this.handle = handle;
    this.stats = stats;
    this.name = name;
  }

  private void checkOpen() throws IOException {
    if (closed) {
      throw new IOException(FSExceptionMessages.STREAM_IS_CLOSED + ": " + name);
    }
  }

  @Override
  public synchronized void write(int b) throws IOException {
    checkOpen();
    if (buffered == BUFFER) {
      send();
    }
    buf[buffered++] = (byte) b;
  }

  @Override
  public synchronized void write(byte[] b, int off, int len) throws IOException {
    checkOpen();
    if (off < 0 || len < 0 || len > b.length - off) {
      throw new IndexOutOfBoundsException("offset " + off + ", length " + len + ", buffer " + b.length);
    }
    while (len > 0) {
      if (buffered == BUFFER) {
        send();
      }
      int n = Math.min(len, BUFFER - buffered);
      System.arraycopy(b, off, buf, buffered, n);
      buffered += n;
      off += n;
      len -= n;
    }
  }

  private void send() throws IOException {
    send(false);
  }

  /** Sends what is buffered; with {@code hflush}, the sidecar hflushes after it (one call). */
  private void send(boolean hflush) throws IOException {
    if (buffered == 0) {
      return;
    }
    ByteString data = ByteString.copyFrom(buf, 0, buffered);
    Rpc.call(conn, () -> conn.call().write(
        SidecarWriteRequest.newBuilder().setHandle(handle).setData(data).setHflush(hflush).build()));
    if (stats != null) {
      stats.incrementBytesWritten(buffered);
      stats.incrementWriteOps(1);
    }
    buffered = 0;
  }

  /** Sends what is buffered (no durability; {@link #hflush} for that). */
  @Override
  public synchronized void flush() throws IOException {
    if (!closed) {
      send();
    }
  }

  @Override
  public synchronized void hflush() throws IOException {
    checkOpen();
    if (buffered > 0) {
      send(true);
    } else {
      Rpc.call(conn, () -> conn.call().hflush(SidecarCommitRequest.newBuilder().setHandle(handle).build()));
    }
  }

  @Override
  public synchronized void hsync() throws IOException {
    checkOpen();
    send();
    Rpc.call(conn, () -> conn.call().hsync(SidecarCommitRequest.newBuilder().setHandle(handle).build()));
  }

  @Override
  public synchronized void close() throws IOException {
    if (closed) {
      return;
    }
    try {
      send();
      Rpc.call(conn, () -> conn.call().commit(SidecarCommitRequest.newBuilder().setHandle(handle).build()));
    } finally {
      closed = true;
    }
  }

  @Override
  public boolean hasCapability(String capability) {
    switch (capability.toLowerCase(java.util.Locale.ROOT)) {
      case StreamCapabilities.HFLUSH:
      case StreamCapabilities.HSYNC:
        return true;
      default:
        return false;
    }
  }
}
