package io.ozoners.hadoop.fs;

import io.grpc.StatusRuntimeException;
import io.ozoners.proto.DatanodeDetails;
import io.ozoners.proto.KeyBlock;
import io.ozoners.proto.KeyRef;
import io.ozoners.proto.SidecarCloseRequest;
import io.ozoners.proto.SidecarOpenRequest;
import io.ozoners.proto.SidecarOpenResponse;
import io.ozoners.proto.SidecarReadRequest;
import io.ozoners.proto.SidecarReadResponse;
import java.io.EOFException;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.concurrent.atomic.AtomicReferenceArray;
import org.apache.hadoop.fs.ByteBufferPositionedReadable;
import org.apache.hadoop.fs.ByteBufferReadable;
import org.apache.hadoop.fs.CanUnbuffer;
import org.apache.hadoop.fs.FSExceptionMessages;
import org.apache.hadoop.fs.FSInputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.StreamCapabilities;

/**
 * A file opened through the sidecar. Reads of blocks with a replica on this
 * node go straight to the block file (a descriptor handed over by the
 * sidecar's pass-through relay), verified in this JVM when the stream
 * verifies; everything else, and every refusal, invalid slot or checksum
 * mismatch, goes through the sidecar.
 */
final class OzrsInputStream extends FSInputStream
    implements ByteBufferReadable, ByteBufferPositionedReadable, CanUnbuffer, StreamCapabilities {
  private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger(OzrsInputStream.class);
  private static final int PIECE = 4 << 20;
  /**
   * Sequential reads smaller than this are served from a buffer filled by
   * one read of this size (HBase's WAL reader reads a byte at a time; each
   * would otherwise be a read of its own, through the sidecar for a remote
   * block). Larger reads go straight into the caller's buffer.
   */
  static final int READ_AHEAD = 64 << 10;

  private final SidecarConnection conn;
  private final KeyRef key;
  private final Boolean verifyOverride;
  private final FileSystem.Statistics stats;
  private final String name;
  private volatile long handle;
  private final long size;
  private final boolean verify;
  private final List<KeyBlock> blocks;
  private final AtomicReferenceArray<LocalBlock> locals;
  /** Blocks whose local replica failed in this stream: read through the sidecar. */
  private final boolean[] skipLocal;
  private long pos;
  private final byte[] oneByte = new byte[1];
  /** The read-ahead buffer (allocated on first use, released by unbuffer) and what it holds. */
  private byte[] ahead;
  private ByteBuffer aheadBuf;
  private long aheadStart;
  private int aheadLen;
  private volatile boolean closed;

  OzrsInputStream(SidecarConnection conn, KeyRef key, Boolean verifyOverride,
      FileSystem.Statistics stats, String name) throws IOException {
    this.conn = conn;
    this.key = key;
    this.verifyOverride = verifyOverride;
    this.stats = stats;
    this.name = name;
    SidecarOpenResponse o = open();
    this.handle = o.getHandle();
    this.size = o.getSize();
    this.verify = o.getVerifyChecksum();
    // The key as the sidecar's stream reads it (one lookup for both).
    List<KeyBlock> b = o.getKey().getBlocksList();
    long covered = 0;
    for (KeyBlock kb : b) {
      covered = Math.max(covered, kb.getOffset() + kb.getLength());
    }
    // A file being written (its synced data is not in committed blocks):
    // every read through the sidecar.
    this.blocks = covered == size ? b : List.of();
    if (covered != size) {
      LOG.debug("{}: blocks cover {} of {} bytes: every read through the sidecar", name, covered, size);
    }
    this.locals = new AtomicReferenceArray<>(this.blocks.size());
    this.skipLocal = new boolean[this.blocks.size()];
  }

  private SidecarOpenResponse open() throws IOException {
    SidecarOpenRequest.Builder r = SidecarOpenRequest.newBuilder().setKey(key);
    if (verifyOverride != null) {
      r.setVerifyChecksum(verifyOverride);
    }
    try {
      return Rpc.call(conn, () -> conn.call().open(r.build()));
    } catch (java.nio.file.AccessDeniedException e) {
      if (verifyOverride == null) {
        throw e;
      }
      // The policy refuses overrides: it has the last word (the sidecar
      // counts the denial); the stream gets the policy's setting.
      SidecarOpenRequest plain = SidecarOpenRequest.newBuilder().setKey(key).build();
      return Rpc.call(conn, () -> conn.call().open(plain));
    }
  }

  /** The verify-checksum setting in force for this stream. */
  boolean verifyChecksum() {
    return verify;
  }

  long size() {
    return size;
  }

  private void checkOpen() throws IOException {
    if (closed) {
      throw new IOException(FSExceptionMessages.STREAM_IS_CLOSED + ": " + name);
    }
  }

  // ------------------------------------------------------------- positional

  /**
   * Reads up to {@code dst.remaining()} bytes at {@code position}; returns
   * the count, or -1 at or past the end.
   */
  int pread(long position, ByteBuffer dst) throws IOException {
    checkOpen();
    if (position < 0) {
      throw new EOFException(FSExceptionMessages.NEGATIVE_SEEK + ": " + position);
    }
    if (!dst.hasRemaining()) {
      return 0;
    }
    if (position >= size) {
      return -1;
    }
    int n = (int) Math.min(dst.remaining(), size - position);
    int done = 0;
    while (done < n) {
      long p = position + done;
      int bi = blockAt(p);
      int len;
      if (bi < 0) {
        len = Math.min(n - done, PIECE);
        viaSidecar(p, dst, len);
      } else {
        KeyBlock kb = blocks.get(bi);
        long inBlock = p - kb.getOffset();
        len = (int) Math.min(n - done, kb.getLength() - inBlock);
        readBlock(bi, kb, inBlock, p, dst, len);
      }
      done += len;
    }
    if (stats != null) {
      stats.incrementBytesRead(n);
      stats.incrementReadOps(1);
    }
    return n;
  }

  private int blockAt(long p) {
    int lo = 0;
    int hi = blocks.size() - 1;
    while (lo <= hi) {
      int mid = (lo + hi) >>> 1;
      KeyBlock b = blocks.get(mid);
      if (p < b.getOffset()) {
        hi = mid - 1;
      } else if (p >= b.getOffset() + b.getLength()) {
        lo = mid + 1;
      } else {
        return mid;
      }
    }
    return -1;
  }

  private void readBlock(int bi, KeyBlock kb, long inBlock, long p, ByteBuffer dst, int len)
      throws IOException {
    LocalBlock lb = skipLocal[bi] ? null : local(bi, kb);
    if (lb != null && lb.acquire()) {
      int start = dst.position();
      try {
        if (lb.valid()) {
          lb.read(inBlock, dst, len, verify);
          if (lb.valid()) {
            dst.position(start + len);
            return;
          }
        }
        // Invalidated (the block was deleted or replaced): drop it.
        dropLocal(bi, lb);
      } catch (LocalBlock.ChecksumMismatch e) {
        LOG.warn("{}: {}; reading it verified through the sidecar", name, e.getMessage());
        // A bad local replica: never again in this stream; the sidecar's
        // verified read skips it for another and reports it to the OM.
        skipLocal[bi] = true;
        dropLocal(bi, lb);
        dst.position(start);
        verifiedViaSidecar(p, dst, len);
        return;
      } catch (IOException e) {
        LOG.warn("{}: local read of block {} failed ({}); through the sidecar", name, bi, e.toString());
        skipLocal[bi] = true;
        dropLocal(bi, lb);
      } finally {
        lb.unref();
      }
      dst.position(start);
    }
    viaSidecar(p, dst, len);
  }

  private LocalBlock local(int bi, KeyBlock kb) {
    LocalBlock lb = locals.get(bi);
    if (lb != null) {
      return lb;
    }
    synchronized (locals) {
      lb = locals.get(bi);
      if (lb != null || skipLocal[bi] || closed) {
        return lb;
      }
      for (DatanodeDetails d : kb.getReplicasList()) {
        RelayConnection rc = conn.relay(d.getId());
        if (rc == null) {
          continue;
        }
        try {
          lb = rc.getBlock(kb.getBlock(), kb.getToken());
          locals.set(bi, lb);
          return lb;
        } catch (RelayConnection.ShortCircuitRefused e) {
          LOG.debug("{}: short-circuit refused for block {}: {}", name, bi, e.getMessage());
          skipLocal[bi] = true;
          return null;
        } catch (IOException e) {
          LOG.warn("{}: short-circuit to {} failed: {}", name, d.getId(), e.toString());
          conn.backoff(d.getId());
          return null;
        }
      }
      skipLocal[bi] = true;
      return null;
    }
  }

  private void dropLocal(int bi, LocalBlock lb) {
    if (locals.compareAndSet(bi, lb, null)) {
      lb.unref();
    }
  }

  /** Reads through the sidecar's data socket, reopening once after a sidecar restart. */
  private void viaSidecar(long p, ByteBuffer dst, int len) throws IOException {
    int done = 0;
    boolean reopened = false;
    while (done < len) {
      int want = Math.min(len - done, PIECE);
      int got;
      try {
        got = conn.read(handle, p + done, dst, want);
      } catch (FileNotFoundException e) {
        if (reopened) {
          throw e;
        }
        reopen();
        reopened = true;
        continue;
      }
      if (got <= 0) {
        throw new EOFException("sidecar returned no bytes at " + (p + done) + " of " + name);
      }
      done += got;
    }
  }

  private void verifiedViaSidecar(long p, ByteBuffer dst, int len) throws IOException {
    int done = 0;
    while (done < len) {
      int want = Math.min(len - done, PIECE);
      long at = p + done;
      SidecarReadResponse r = Rpc.call(conn, () -> conn.call().verifiedRead(
          SidecarReadRequest.newBuilder().setHandle(handle).setOffset(at).setLength(want).build()));
      int got = r.getData().size();
      if (got <= 0 || got > want) {
        throw new IOException("sidecar returned " + got + " bytes for a read of " + want);
      }
      r.getData().copyTo(dst);
      done += got;
    }
  }

  private synchronized void reopen() throws IOException {
    SidecarOpenResponse o = open();
    if (o.getSize() != size || !sameBlocks(o.getKey().getBlocksList())) {
      closeQuietly(o.getHandle());
      throw new IOException(name + " was replaced while open (" + size + " -> " + o.getSize() + " bytes)");
    }
    handle = o.getHandle();
  }

  /** Whether {@code other} holds this stream's blocks (a reopened handle reads the same file). */
  private boolean sameBlocks(List<KeyBlock> other) {
    if (blocks.isEmpty()) {
      return true; // a file being written: every read goes through the sidecar anyway
    }
    if (other.size() != blocks.size()) {
      return false;
    }
    for (int i = 0; i < other.size(); i++) {
      if (!other.get(i).getBlock().equals(blocks.get(i).getBlock())) {
        return false;
      }
    }
    return true;
  }

  @Override
  public int read(long position, ByteBuffer buf) throws IOException {
    return pread(position, buf);
  }

  @Override
  public void readFully(long position, ByteBuffer buf) throws IOException {
    int want = buf.remaining();
    if (position < 0 || position + want > size) {
      throw new EOFException(FSExceptionMessages.EOF_IN_READ_FULLY + ": " + want + " bytes at "
          + position + " of " + size + " in " + name);
    }
    while (buf.hasRemaining()) {
      if (pread(position + (want - buf.remaining()), buf) < 0) {
        throw new EOFException(FSExceptionMessages.EOF_IN_READ_FULLY);
      }
    }
  }

  @Override
  public int read(long position, byte[] b, int off, int len) throws IOException {
    validatePositionedReadArgs(position, b, off, len);
    if (len == 0) {
      return 0;
    }
    return pread(position, ByteBuffer.wrap(b, off, len));
  }

  @Override
  public void readFully(long position, byte[] b, int off, int len) throws IOException {
    validatePositionedReadArgs(position, b, off, len);
    readFully(position, ByteBuffer.wrap(b, off, len));
  }

  // ------------------------------------------------------------- sequential

  @Override
  public synchronized int read() throws IOException {
    checkOpen();
    if (buffered(pos)) {
      return ahead[(int) (pos++ - aheadStart)] & 0xff;
    }
    int n = read(oneByte, 0, 1);
    return n <= 0 ? -1 : oneByte[0] & 0xff;
  }

  @Override
  public synchronized int read(byte[] b, int off, int len) throws IOException {
    checkOpen();
    if (off < 0 || len < 0 || len > b.length - off) {
      throw new IndexOutOfBoundsException("offset " + off + ", length " + len + ", buffer " + b.length);
    }
    return len == 0 ? 0 : readAtPos(ByteBuffer.wrap(b, off, len));
  }

  @Override
  public synchronized int read(ByteBuffer buf) throws IOException {
    checkOpen();
    return readAtPos(buf);
  }

  /** Whether the read-ahead buffer holds the byte at {@code p}. */
  private boolean buffered(long p) {
    return p >= aheadStart && p < aheadStart + aheadLen;
  }

  /**
   * A read at the stream's position, which advances by what was read: from
   * the read-ahead buffer when it holds the position, else straight into
   * {@code buf} when that is at least {@link #READ_AHEAD} long, else through
   * a refill of the buffer. The file's bytes never change while it is open,
   * so the buffer stays good across seeks and positional reads.
   */
  private int readAtPos(ByteBuffer buf) throws IOException {
    int want = buf.remaining();
    if (want == 0) {
      return 0;
    }
    if (pos >= size) {
      return -1;
    }
    if (!buffered(pos)) {
      if (want >= READ_AHEAD) {
        int n = pread(pos, buf);
        if (n > 0) {
          pos += n;
        }
        return n;
      }
      if (ahead == null) {
        ahead = new byte[READ_AHEAD];
        aheadBuf = ByteBuffer.wrap(ahead);
      }
      aheadBuf.clear().limit((int) Math.min(READ_AHEAD, size - pos));
      aheadLen = 0;
      int got = pread(pos, aheadBuf);
      if (got <= 0) {
        return -1;
      }
      aheadStart = pos;
      aheadLen = got;
    }
    int off = (int) (pos - aheadStart);
    int n = Math.min(want, aheadLen - off);
    buf.put(ahead, off, n);
    pos += n;
    return n;
  }

  @Override
  public synchronized void seek(long target) throws IOException {
    checkOpen();
    if (target < 0) {
      throw new EOFException(FSExceptionMessages.NEGATIVE_SEEK + ": " + target);
    }
    if (target > size) {
      throw new EOFException(FSExceptionMessages.CANNOT_SEEK_PAST_EOF + ": " + target + " > " + size);
    }
    pos = target;
  }

  @Override
  public synchronized long getPos() {
    return pos;
  }

  @Override
  public boolean seekToNewSource(long targetPos) {
    return false;
  }

  @Override
  public synchronized int available() throws IOException {
    checkOpen();
    return (int) Math.min(Integer.MAX_VALUE, size - pos);
  }

  @Override
  public synchronized long skip(long n) throws IOException {
    checkOpen();
    if (n <= 0) {
      return 0;
    }
    long s = Math.min(n, size - pos);
    pos += s;
    return s;
  }

  // ------------------------------------------------------------- lifecycle

  /** Releases the block descriptors, their slots and the read-ahead buffer; reads reopen them. */
  @Override
  public void unbuffer() {
    synchronized (this) {
      ahead = null;
      aheadBuf = null;
      aheadLen = 0;
    }
    synchronized (locals) {
      for (int i = 0; i < locals.length(); i++) {
        LocalBlock lb = locals.getAndSet(i, null);
        if (lb != null) {
          lb.unref();
        }
      }
    }
  }

  /** The file's blocks (for tests and the benchmark). */
  List<KeyBlock> blocks() {
    return blocks;
  }

  /** Local block descriptors held now (for tests). */
  int localDescriptors() {
    int n = 0;
    for (int i = 0; i < locals.length(); i++) {
      if (locals.get(i) != null) {
        n++;
      }
    }
    return n;
  }

  @Override
  public void close() throws IOException {
    if (closed) {
      return;
    }
    closed = true;
    unbuffer();
    closeHandle();
  }

  private void closeHandle() {
    closeQuietly(handle);
  }

  private void closeQuietly(long h) {
    try {
      conn.call().close(SidecarCloseRequest.newBuilder().setHandle(h).build());
    } catch (StatusRuntimeException ignored) {
      // the sidecar forgets handles of a restarted process
    }
  }

  @Override
  public boolean hasCapability(String capability) {
    switch (capability.toLowerCase(java.util.Locale.ROOT)) {
      case StreamCapabilities.READBYTEBUFFER:
      case StreamCapabilities.PREADBYTEBUFFER:
      case StreamCapabilities.UNBUFFER:
        return true;
      default:
        return false;
    }
  }

  @Override
  public String toString() {
    return "OzrsInputStream{" + name + ", size=" + size + ", verify=" + verify + "}";
  }
}
