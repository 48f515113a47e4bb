package io.ozoners.hadoop.fs;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import io.ozoners.proto.BlockData;
import io.ozoners.proto.BlockId;
import io.ozoners.proto.ChecksumData;
import io.ozoners.proto.ChecksumType;
import io.ozoners.proto.ChunkInfo;
import java.io.File;
import java.io.FileInputStream;
import java.io.RandomAccessFile;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.util.Random;
import java.util.zip.CRC32;
import java.util.zip.CRC32C;
import java.util.zip.Checksum;
import org.junit.Test;

/** Window verification of local block reads, both ways, against a flipped byte; CRC combine. */
public class TestLocalBlockVerify {
  static int crc(Checksum c, byte[] b, int off, int len) {
    c.reset();
    c.update(b, off, len);
    return (int) c.getValue();
  }

  @Test
  public void combineMatchesTheCrcOfTheConcatenation() {
    Random r = new Random(1);
    for (int poly : new int[] {CrcCombine.CRC32C, CrcCombine.CRC32}) {
      Checksum c = poly == CrcCombine.CRC32C ? new CRC32C() : new CRC32();
      for (int t = 0; t < 50; t++) {
        byte[] a = new byte[r.nextInt(10_000)];
        byte[] b = new byte[1 + r.nextInt(10_000)];
        r.nextBytes(a);
        r.nextBytes(b);
        byte[] ab = new byte[a.length + b.length];
        System.arraycopy(a, 0, ab, 0, a.length);
        System.arraycopy(b, 0, ab, a.length, b.length);
        int want = crc(c, ab, 0, ab.length);
        int ca = crc(c, a, 0, a.length);
        int cb = crc(c, b, 0, b.length);
        assertEquals(want, CrcCombine.combine(poly, ca, cb, b.length));
        assertEquals(want, CrcCombine.of(poly, b.length).shift(ca) ^ cb);
      }
    }
  }

  static LocalBlock block(File f, byte[] data, int window) throws Exception {
    CRC32C c = new CRC32C();
    ChecksumData.Builder cs = ChecksumData.newBuilder().setType(ChecksumType.CRC32C).setBytesPerChecksum(window);
    for (int off = 0; off < data.length; off += window) {
      cs.addChecksums(crc(c, data, off, Math.min(window, data.length - off)));
    }
    BlockData bd = BlockData.newBuilder().setSize(data.length).setCommitted(true)
        .addChunks(ChunkInfo.newBuilder().setOffset(0).setLen(data.length).setChecksum(cs)).build();
    return new LocalBlock(null, 0, BlockId.newBuilder().setContainerId(1).setLocalId(2).build(), bd,
        new FileInputStream(f));
  }

  @Test
  public void verifiedReadsBothWaysCatchAFlippedByteInTheirWindowsOnly() throws Exception {
    int window = 4096;
    byte[] data = new byte[(1 << 20) + 1234]; // a short last window
    new Random(2).nextBytes(data);
    File f = Files.createTempFile("block", ".bin").toFile();
    f.deleteOnExit();
    Files.write(f.toPath(), data);
    int flip = 300_001;
    Random r = new Random(3);
    for (boolean staged : new boolean[] {true, false}) {
      LocalBlock.STAGED = staged;
      LocalBlock lb = block(f, data, window);
      for (int t = 0; t < 300; t++) {
        int len = 1 + r.nextInt(70_000);
        long off = r.nextInt(data.length - len + 1);
        ByteBuffer dst = r.nextBoolean() ? ByteBuffer.allocateDirect(len + 7) : ByteBuffer.allocate(len + 7);
        dst.position(3);
        lb.read(off, dst, len, true);
        assertEquals(3 + len, dst.position());
        byte[] got = new byte[len];
        dst.position(3);
        dst.get(got);
        byte[] want = new byte[len];
        System.arraycopy(data, (int) off, want, 0, len);
        assertArrayEquals(want, got);
      }
      try (RandomAccessFile raf = new RandomAccessFile(f, "rw")) {
        raf.seek(flip);
        raf.write(data[flip] ^ 1);
      }
      int caught = 0;
      for (int t = 0; t < 300; t++) {
        int len = 1 + r.nextInt(70_000);
        long off = r.nextInt(data.length - len + 1);
        long ws = off / window * window;
        long we = Math.min((off + len + window - 1) / window * window, data.length);
        boolean covers = flip >= ws && flip < we;
        try {
          lb.read(off, ByteBuffer.allocateDirect(len), len, true);
          assertTrue("a read whose windows hold the flipped byte must fail (staged=" + staged + ")", !covers);
        } catch (LocalBlock.ChecksumMismatch e) {
          assertTrue("only reads whose windows hold the flipped byte fail: " + e.getMessage(), covers);
          assertTrue(e.getMessage(), e.getMessage().contains("window " + flip / window));
          caught++;
        }
      }
      // Reads straddling the flipped byte's window, for sure.
      try {
        lb.read(flip - 10, ByteBuffer.allocate(20), 20, true);
        fail("the flipped byte went unnoticed");
      } catch (LocalBlock.ChecksumMismatch e) {
        caught++;
      }
      ByteBuffer noVerify = ByteBuffer.allocate(20);
      lb.read(flip - 10, noVerify, 20, false);
      assertEquals("verify off returns what is on disk", (byte) (data[flip] ^ 1), noVerify.get(10));
      assertTrue(caught > 0);
      try (RandomAccessFile raf = new RandomAccessFile(f, "rw")) {
        raf.seek(flip);
        raf.write(data[flip]);
      }
    }
    LocalBlock.STAGED = false;
  }
}
