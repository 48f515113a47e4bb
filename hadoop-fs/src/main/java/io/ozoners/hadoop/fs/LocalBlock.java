package io.ozoners.hadoop.fs;

import io.ozoners.proto.BlockData;
import io.ozoners.proto.BlockId;
import io.ozoners.proto.ChecksumData;
import io.ozoners.proto.ChecksumType;
import io.ozoners.proto.ChunkInfo;
import java.io.EOFException;
import java.io.FileInputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.zip.CRC32;
import java.util.zip.CRC32C;
import java.util.zip.Checksum;

/**
 * A local replica's block file, read with positional reads
 * ({@link FileChannel#read(ByteBuffer, long)}, a real pread), with the
 * window checksums of its committed metadata (the datanode's fine 4 KiB
 * windows where it has them). Guarded by its slot: every read checks the
 * VALID bit before and after.
 *
 * <p>Positional reads, not a {@code MappedByteBuffer}: a block file
 * truncated under a mapping faults (SIGBUS), and the JVM does not make that
 * a clean read error. Measured with a 64 MiB file truncated under its
 * mapping: on JDK 17 a bulk copy out of the mapping raises
 * {@code InternalError} later, outside the read that faulted (in whatever
 * code the thread runs next); on JDK 17 and 25, {@code CRC32C.update} over
 * the mapping kills the JVM (the fault is inside the CRC intrinsic). A
 * positional read of a truncated file returns short, which this class
 * reports as {@link EOFException}.
 */
final class LocalBlock {
  private static final ThreadLocal<Scratch> SCRATCH = ThreadLocal.withInitial(Scratch::new);

  private final RelayConnection conn;
  final int slot;
  final long container;
  final long local;
  final long length;
  private final FileInputStream file;
  private final FileChannel channel;
  private final ChecksumType type;
  private final int window;
  private final int[] sums;
  /** The reflected polynomial and the shift by one window, for combined checks. */
  private final int poly;
  private final CrcCombine shift;
  /** Readers in flight plus one for the owner; the file closes at zero. */
  private final AtomicInteger refs = new AtomicInteger(1);

  LocalBlock(RelayConnection conn, int slot, BlockId id, BlockData data, FileInputStream file)
      throws IOException {
    this.conn = conn;
    this.slot = slot;
    this.container = id.getContainerId();
    this.local = id.getLocalId();
    this.length = data.getSize();
    this.file = file;
    this.channel = file.getChannel();
    ChecksumType t = ChecksumType.NONE;
    int w = 0;
    int count = 0;
    for (ChunkInfo c : data.getChunksList()) {
      ChecksumData cs = c.hasFineChecksum() && c.getFineChecksum().getChecksumsCount() > 0
          ? c.getFineChecksum() : c.getChecksum();
      if (w == 0) {
        w = cs.getBytesPerChecksum();
        t = cs.getType();
      } else if (w != cs.getBytesPerChecksum() || t != cs.getType()) {
        throw new IOException("block " + container + "/" + local + ": chunks disagree on checksums");
      }
      count += cs.getChecksumsCount();
    }
    int[] s = new int[count];
    int i = 0;
    for (ChunkInfo c : data.getChunksList()) {
      ChecksumData cs = c.hasFineChecksum() && c.getFineChecksum().getChecksumsCount() > 0
          ? c.getFineChecksum() : c.getChecksum();
      for (int v : cs.getChecksumsList()) {
        s[i++] = v;
      }
    }
    boolean checked = t == ChecksumType.CRC32C || t == ChecksumType.CRC32;
    if (checked && (w <= 0 || (long) count * w < length || (long) (count - 1) * w >= Math.max(length, 1))) {
      throw new IOException("block " + container + "/" + local + ": " + count + " checksums of "
          + w + " bytes do not cover " + length + " bytes");
    }
    this.type = checked ? t : ChecksumType.NONE;
    this.window = w;
    this.sums = s;
    this.poly = t == ChecksumType.CRC32 ? CrcCombine.CRC32 : CrcCombine.CRC32C;
    this.shift = checked ? CrcCombine.of(poly, w) : null;
  }

  /** Takes a reference for a read; false once the block is being closed. */
  boolean acquire() {
    for (;;) {
      int r = refs.get();
      if (r == 0) {
        return false;
      }
      if (refs.compareAndSet(r, r + 1)) {
        return true;
      }
    }
  }

  void unref() {
    if (refs.decrementAndGet() == 0) {
      try {
        file.close();
      } catch (IOException ignored) {
        // read-only descriptor
      }
      conn.release(slot);
    }
  }

  boolean valid() {
    return conn.valid(slot, container, local);
  }

  /**
   * Reads {@code n} bytes at {@code off} of the block into {@code dst}
   * (from its position, which advances by {@code n}), verifying the
   * covering windows when {@code verify}. Throws {@link ChecksumMismatch}
   * on a bad window and {@link EOFException} when the file is shorter than
   * its metadata (truncated under us).
   */
  void read(long off, ByteBuffer dst, int n, boolean verify) throws IOException {
    boolean checked = verify && type != ChecksumType.NONE;
    if (checked && STAGED && (off % window != 0 || ((off + n) % window != 0 && off + n != length))) {
      readStaged(off, dst, n);
      return;
    }
    int start = dst.position();
    int lim = dst.limit();
    dst.limit(start + n);
    try {
      preadFully(dst, off);
    } finally {
      dst.limit(lim);
    }
    if (checked) {
      verify(off, dst, start, n);
    }
  }

  /** Reads into {@code b} (position to limit) from {@code pos} of the file. */
  private void preadFully(ByteBuffer b, long pos) throws IOException {
    long at = pos;
    while (b.hasRemaining()) {
      int r = channel.read(b, at);
      if (r < 0) {
        throw new EOFException("block file " + container + "/" + local + " ends at " + at
            + ", expected " + length + " bytes");
      }
      at += r;
    }
  }

  /**
   * Whether an unaligned verified read takes one pread of its covering
   * windows into a per-thread buffer and one copy (true), or a pread
   * straight into the caller's buffer plus two small preads of the end
   * windows' outer parts (false, measured faster on an idle machine:
   * docs/PERFORMANCE.md). The benchmark sets it to compare both.
   */
  static volatile boolean STAGED = Boolean.parseBoolean(System.getProperty("ozrs.verify.staged", "false"));

  /** One pread of the covering windows, each checked, the requested bytes copied out. */
  private void readStaged(long off, ByteBuffer dst, int n) throws IOException {
    long ws = off / window * window;
    long we = Math.min((off + n + window - 1) / window * window, length);
    Scratch s = SCRATCH.get();
    ByteBuffer b = s.buffer((int) (we - ws));
    preadFully(b, ws);
    b.flip();
    Checksum crc = type == ChecksumType.CRC32C ? s.crc32c : s.crc32;
    crc.reset();
    crc.update(b);
    if ((int) crc.getValue() != expected(ws, we)) {
      b.flip();
      findBadWindow(b, ws, we, crc);
    }
    b.limit((int) (off - ws) + n).position((int) (off - ws));
    dst.put(b);
  }

  /**
   * Checks the windows covering {@code [off, off + n)}, whose middle part is
   * in {@code dst} from {@code start}: one CRC over the covering bytes (the
   * outer parts of the end windows read into the scratch buffer) against the
   * combined window checksums.
   */
  private void verify(long off, ByteBuffer dst, int start, int n) throws IOException {
    Scratch s = SCRATCH.get();
    Checksum crc = type == ChecksumType.CRC32C ? s.crc32c : s.crc32;
    long end = off + n;
    long ws = off / window * window;
    long we = Math.min((end + window - 1) / window * window, length);
    int savedPos = dst.position();
    int savedLim = dst.limit();
    crc.reset();
    if (ws < off) {
      crcFile(crc, s, ws, (int) (off - ws));
    }
    dst.limit(start + n).position(start);
    crc.update(dst);
    dst.limit(savedLim).position(savedPos);
    if (we > end) {
      crcFile(crc, s, end, (int) (we - end));
    }
    if ((int) crc.getValue() != expected(ws, we)) {
      ByteBuffer b = s.buffer((int) (we - ws));
      preadFully(b, ws);
      b.flip();
      findBadWindow(b, ws, we, crc);
    }
  }

  /** The CRC of the windows {@code [ws, we)} combined from their checksums. */
  private int expected(long ws, long we) {
    int first = (int) (ws / window);
    int last = (int) ((we - 1) / window);
    int exp = sums[first];
    for (int w = first + 1; w <= last; w++) {
      long len = Math.min(window, length - (long) w * window);
      exp = len == window ? shift.shift(exp) ^ sums[w] : CrcCombine.combine(poly, exp, sums[w], len);
    }
    return exp;
  }

  /** {@code b} holds the windows {@code [ws, we)}, which do not match: names the first bad one. */
  private void findBadWindow(ByteBuffer b, long ws, long we, Checksum crc) throws ChecksumMismatch {
    int first = (int) (ws / window);
    int count = (int) ((we - ws + window - 1) / window);
    for (int i = 0; i < count; i++) {
      int a = i * window;
      int e = (int) Math.min(a + (long) window, we - ws);
      b.limit(e).position(a);
      crc.reset();
      crc.update(b);
      int got = (int) crc.getValue();
      if (got != sums[first + i]) {
        throw new ChecksumMismatch(String.format(
            "checksum mismatch in block %d/%d at window %d (bytes %d-%d): %08x, expected %08x",
            container, local, first + i, ws + a, ws + e, got, sums[first + i]));
      }
    }
    throw new ChecksumMismatch(String.format("checksum mismatch in block %d/%d, bytes %d-%d",
        container, local, ws, we));
  }

  /** Adds {@code len} bytes of the file at {@code pos} to {@code crc}. */
  private void crcFile(Checksum crc, Scratch s, long pos, int len) throws IOException {
    ByteBuffer b = s.buffer(len);
    while (b.hasRemaining()) {
      if (channel.read(b, pos + b.position()) < 0) {
        throw new EOFException("block file " + container + "/" + local + " ends at "
            + (pos + b.position()));
      }
    }
    b.flip();
    crc.update(b);
  }

  /** A window's bytes do not match its checksum. */
  static final class ChecksumMismatch extends IOException {
    private static final long serialVersionUID = 1L;

    ChecksumMismatch(String m) {
      super(m);
    }
  }

  /** Per-thread checksum state and a buffer for the outer parts of end windows. */
  private static final class Scratch {
    final CRC32C crc32c = new CRC32C();
    final CRC32 crc32 = new CRC32();
    ByteBuffer buf = ByteBuffer.allocateDirect(16 << 10);

    ByteBuffer buffer(int len) {
      if (buf.capacity() < len) {
        buf = ByteBuffer.allocateDirect(Math.max(len, buf.capacity() * 2));
      }
      buf.clear();
      buf.limit(len);
      return buf;
    }
  }
}
