package io.ozoners.hadoop.fs;

import java.io.EOFException;
import java.io.FileDescriptor;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import org.newsclub.net.unix.AFUNIXSocket;

/**
 * The short-circuit socket framing ({@code version u8 | command u8 | length
 * u32 BE | body}), as spoken by datanodes and relayed by the sidecar; file
 * descriptors arrive with the first bytes of a response frame.
 */
final class Frames {
  static final int VERSION = 1;
  static final int HEADER = 6;
  static final int MAX_FRAME = 4 << 20;
  static final int CMD_HANDSHAKE = 1;
  static final int CMD_GET_BLOCK = 2;
  static final int CMD_RELEASE = 3;
  static final int CMD_SIDECAR_READ = 0x10;
  static final int CMD_ERROR = 0x7f;
  static final int RESPONSE = 0x80;

  private Frames() {}

  /** A received frame: command, body and the descriptors that came with it. */
  static final class Frame {
    final int cmd;
    final byte[] body;
    final FileDescriptor[] fds;

    Frame(int cmd, byte[] body, FileDescriptor[] fds) {
      this.cmd = cmd;
      this.body = body;
      this.fds = fds;
    }
  }

  static void send(OutputStream out, int cmd, byte[] body) throws IOException {
    byte[] frame = new byte[HEADER + body.length];
    frame[0] = (byte) VERSION;
    frame[1] = (byte) cmd;
    putInt(frame, 2, body.length);
    System.arraycopy(body, 0, frame, HEADER, body.length);
    out.write(frame);
    out.flush();
  }

  static void putInt(byte[] b, int at, int v) {
    b[at] = (byte) (v >>> 24);
    b[at + 1] = (byte) (v >>> 16);
    b[at + 2] = (byte) (v >>> 8);
    b[at + 3] = (byte) v;
  }

  /** Reads exactly {@code n} bytes; EOF before them is an {@link EOFException}. */
  static void readFully(InputStream in, byte[] b, int off, int n) throws IOException {
    while (n > 0) {
      int r = in.read(b, off, n);
      if (r < 0) {
        throw new EOFException("peer closed the connection");
      }
      off += r;
      n -= r;
    }
  }

  /** Reads one frame and the descriptors received with it. */
  static Frame recv(AFUNIXSocket sock, InputStream in) throws IOException {
    byte[] h = new byte[HEADER];
    readFully(in, h, 0, HEADER);
    FileDescriptor[] fds = sock.getReceivedFileDescriptors();
    if ((h[0] & 0xff) != VERSION) {
      closeAll(fds);
      throw new IOException("unsupported protocol version " + (h[0] & 0xff));
    }
    int len = ((h[2] & 0xff) << 24) | ((h[3] & 0xff) << 16) | ((h[4] & 0xff) << 8) | (h[5] & 0xff);
    if (len < 0 || len > MAX_FRAME) {
      closeAll(fds);
      throw new IOException("frame of " + Integer.toUnsignedString(len) + " bytes exceeds the limit");
    }
    byte[] body = new byte[len];
    readFully(in, body, 0, len);
    FileDescriptor[] more = sock.getReceivedFileDescriptors();
    if (more != null && more.length > 0) {
      fds = fds == null ? more : concat(fds, more);
    }
    return new Frame(h[1] & 0xff, body, fds == null ? new FileDescriptor[0] : fds);
  }

  private static FileDescriptor[] concat(FileDescriptor[] a, FileDescriptor[] b) {
    FileDescriptor[] r = new FileDescriptor[a.length + b.length];
    System.arraycopy(a, 0, r, 0, a.length);
    System.arraycopy(b, 0, r, a.length, b.length);
    return r;
  }

  static void closeAll(FileDescriptor[] fds) {
    if (fds == null) {
      return;
    }
    for (FileDescriptor fd : fds) {
      try {
        new java.io.FileInputStream(fd).close();
      } catch (IOException ignored) {
        // already closed
      }
    }
  }
}
