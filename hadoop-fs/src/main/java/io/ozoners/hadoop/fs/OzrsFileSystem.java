package io.ozoners.hadoop.fs;

import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.ozoners.proto.BucketInfo;
import io.ozoners.proto.ContentSummaryRequest;
import io.ozoners.proto.DeletePathRequest;
import io.ozoners.proto.FsPath;
import io.ozoners.proto.GetFileStatusRequest;
import io.ozoners.proto.IsFileClosedRequest;
import io.ozoners.proto.KeyRef;
import io.ozoners.proto.ListBucketsRequest;
import io.ozoners.proto.ListStatusRequest;
import io.ozoners.proto.ListVolumesRequest;
import io.ozoners.proto.MkdirsRequest;
import io.ozoners.proto.RecoverLeaseRequest;
import io.ozoners.proto.RenameRequest;
import io.ozoners.proto.SidecarCreateRequest;
import io.ozoners.proto.VolumeInfo;
import java.io.File;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.net.URI;
import java.util.ArrayList;
import java.util.List;
import java.util.NoSuchElementException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.CommonPathCapabilities;
import org.apache.hadoop.fs.ContentSummary;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import io.ozoners.proto.SidecarFileChecksum;
import io.ozoners.proto.SidecarChecksumRequest;
import org.apache.hadoop.fs.CompositeCrcFileChecksum;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.FileChecksum;
import org.apache.hadoop.util.DataChecksum;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LeaseRecoverable;
import org.apache.hadoop.fs.ParentNotDirectoryException;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathIOException;
import org.apache.hadoop.fs.RemoteIterator;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.util.Progressable;

/**
 * The Hadoop FileSystem of ozone-rs, scheme {@code ozrs}: paths are
 * {@code /volume/bucket/path} in file-system buckets. Every call goes to the
 * pod's sidecar over its UNIX socket ({@code ozone.client.sidecar.socket});
 * local block files are read in this JVM through the sidecar's pass-through
 * relay ({@code ozone.domain.socket.path}, by default the {@code sockets}
 * directory beside the sidecar's socket).
 *
 * <p>Checksum verification is state of the instance: {@link
 * #setVerifyChecksum(boolean)} applies to every stream the instance opens
 * afterwards (HBase's HFileSystem keeps a verifying and a non-verifying
 * instance side by side); without it the sidecar's policy decides. Where the
 * policy refuses overrides, streams get the policy's setting.
 */
public class OzrsFileSystem extends FileSystem implements LeaseRecoverable {
  /** The URI scheme. */
  public static final String SCHEME = "ozrs";
  /** The sidecar's gRPC socket. */
  public static final String SIDECAR_SOCKET = "ozone.client.sidecar.socket";
  /** The pass-through relay directory. */
  public static final String DOMAIN_SOCKET_PATH = "ozone.domain.socket.path";
  /** on, auto or off: whether local block files are read in this JVM. */
  public static final String SHORT_CIRCUIT = "ozone.client.read.short-circuit";
  /** How long a datanode's relay is not used after a failure. */
  public static final String SHORT_CIRCUIT_BACKOFF = "ozone.client.read.short-circuit.backoff";
  /** Default verify-checksum of this instance's streams (unset: the sidecar's policy). */
  public static final String VERIFY_CHECKSUM = "ozone.client.verify.checksum";
  private static final String BLOCK_SIZE = "ozone.scm.block.size";
  private static final String REPLICATION = "ozone.replication";
  private static final int PAGE = 1000;

  private URI uri;
  private Path workingDir;
  private SidecarConnection conn;
  private volatile Boolean verifyChecksum;
  private long blockSize;
  private short replication;

  @Override
  public String getScheme() {
    return SCHEME;
  }

  @Override
  public void initialize(URI name, Configuration conf) throws IOException {
    super.initialize(name, conf);
    setConf(conf);
    String socket = conf.getTrimmed(SIDECAR_SOCKET, System.getenv("OZONE_SIDECAR_SOCKET"));
    if (socket == null || socket.isEmpty()) {
      throw new IOException("no sidecar socket: set " + SIDECAR_SOCKET
          + " (or OZONE_SIDECAR_SOCKET) to the sidecar's UNIX socket");
    }
    File sock = new File(socket);
    File relay = null;
    String sc = conf.getTrimmed(SHORT_CIRCUIT, "auto").toLowerCase(java.util.Locale.ROOT);
    if (!sc.equals("off") && !sc.equals("false")) {
      String dir = conf.getTrimmed(DOMAIN_SOCKET_PATH);
      relay = dir != null && !dir.isEmpty() ? new File(dir) : new File(sock.getParentFile(), "sockets");
    }
    long backoff = conf.getTimeDuration(SHORT_CIRCUIT_BACKOFF, 10_000,
        java.util.concurrent.TimeUnit.MILLISECONDS);
    this.conn = SidecarConnection.get(sock, relay, backoff);
    String v = conf.getTrimmed(VERIFY_CHECKSUM);
    this.verifyChecksum = v == null || v.isEmpty() ? null : Boolean.parseBoolean(v);
    this.blockSize = conf.getLongBytes(BLOCK_SIZE, 256L << 20);
    String r = conf.getTrimmed(REPLICATION, "THREE");
    this.replication = (short) (r.equalsIgnoreCase("ONE") || r.equals("1") ? 1 : 3);
    this.uri = URI.create(SCHEME + "://" + (name.getAuthority() == null ? "" : name.getAuthority()));
    this.workingDir = getHomeDirectory();
  }

  @Override
  public URI getUri() {
    return uri;
  }

  @Override
  public Path getWorkingDirectory() {
    return workingDir;
  }

  @Override
  public void setWorkingDirectory(Path dir) {
    workingDir = makeQualified(dir);
  }

  @Override
  public void setVerifyChecksum(boolean verify) {
    this.verifyChecksum = verify;
  }

  /** The verify-checksum override this instance gives its streams (null: the policy's). */
  public Boolean getVerifyChecksum() {
    return verifyChecksum;
  }

  @Override
  public long getDefaultBlockSize() {
    return blockSize;
  }

  @Override
  public short getDefaultReplication() {
    return replication;
  }

  // ------------------------------------------------------------- paths

  /** A path split into volume, bucket and the path within the bucket. */
  private static final class Loc {
    final String volume;
    final String bucket;
    final String path;
    final int depth;

    Loc(String volume, String bucket, String path, int depth) {
      this.volume = volume;
      this.bucket = bucket;
      this.path = path;
      this.depth = depth;
    }

    FsPath fs() {
      return FsPath.newBuilder().setVolume(volume).setBucket(bucket).setPath(path).build();
    }

    KeyRef key() {
      return KeyRef.newBuilder().setVolume(volume).setBucket(bucket).setKey(path).build();
    }

    boolean inBucket() {
      return depth >= 3;
    }

    @Override
    public String toString() {
      if (depth == 0) {
        return "/";
      }
      if (depth == 1) {
        return "/" + volume;
      }
      return "/" + volume + "/" + bucket + (path.isEmpty() ? "" : "/" + path);
    }
  }

  private Loc loc(Path p) throws IOException {
    Path q = makeQualified(p);
    String s = q.toUri().getPath();
    List<String> parts = new ArrayList<>();
    for (String c : s.split("/")) {
      if (!c.isEmpty()) {
        parts.add(c);
      }
    }
    for (String c : parts) {
      if (c.equals(".") || c.equals("..")) {
        throw new PathIOException(s, "'.' and '..' are not allowed in paths");
      }
    }
    int d = parts.size();
    return new Loc(d > 0 ? parts.get(0) : "", d > 1 ? parts.get(1) : "",
        d > 2 ? String.join("/", parts.subList(2, d)) : "", d);
  }

  private Path qualify(Loc l, String pathInBucket) {
    String s = "/" + l.volume + "/" + l.bucket + (pathInBucket.isEmpty() ? "" : "/" + pathInBucket);
    return makeQualified(new Path(s));
  }

  private FileStatus dirStatus(Path p, long mtime) {
    return new FileStatus(0, true, 0, 0, mtime, mtime, FsPermission.getDirDefault(), "", "", p);
  }

  private FileStatus status(Loc l, io.ozoners.proto.FileStatus s) {
    Path p = qualify(l, s.getPath());
    if (s.getIsDir()) {
      return dirStatus(p, s.getModifiedMs());
    }
    short repl = (short) (s.getReplicationValue() == 0 ? replication : s.getReplicationValue());
    return new FileStatus(s.getSize(), false, repl, blockSize, s.getModifiedMs(), s.getModifiedMs(),
        FsPermission.getFileDefault(), "", "", p);
  }

  // ------------------------------------------------------------- reads

  @Override
  public FSDataInputStream open(Path f, int bufferSize) throws IOException {
    Loc l = loc(f);
    if (!l.inBucket()) {
      throw new FileNotFoundException(l + " is a " + (l.depth == 0 ? "root" : l.depth == 1 ? "volume" : "bucket")
          + ", not a file");
    }
    try {
      return new FSDataInputStream(new OzrsInputStream(conn, l.key(), verifyChecksum, statistics,
          l.toString()));
    } catch (IOException e) {
      if (e.getMessage() != null && e.getMessage().contains("is a directory")) {
        throw (FileNotFoundException) new FileNotFoundException(l + " is a directory").initCause(e);
      }
      throw e;
    } catch (StatusRuntimeException e) {
      throw Errors.of(e, conn.socket);
    }
  }

  // ------------------------------------------------------------- writes

  @Override
  public FSDataOutputStream create(Path f, FsPermission permission, boolean overwrite,
      int bufferSize, short replication, long blockSize, Progressable progress) throws IOException {
    return createFile(loc(f), overwrite);
  }

  @Override
  public FSDataOutputStream createNonRecursive(Path f, FsPermission permission,
      java.util.EnumSet<org.apache.hadoop.fs.CreateFlag> flags, int bufferSize, short replication,
      long blockSize, Progressable progress) throws IOException {
    Loc l = loc(f);
    checkFileLevel(l);
    Path parent = makeQualified(f).getParent();
    FileStatus ps;
    try {
      ps = getFileStatus(parent);
    } catch (FileNotFoundException e) {
      throw new FileNotFoundException("parent " + parent + " of " + l + " does not exist");
    }
    if (!ps.isDirectory()) {
      throw new ParentNotDirectoryException("parent " + parent + " of " + l + " is a file");
    }
    return createFile(l, flags.contains(org.apache.hadoop.fs.CreateFlag.OVERWRITE));
  }

  private void checkFileLevel(Loc l) throws IOException {
    if (!l.inBucket()) {
      throw new PathIOException(l.toString(), "files live in buckets (/volume/bucket/file):"
          + " none can be created at the root, volume or bucket level");
    }
  }

  private FSDataOutputStream createFile(Loc l, boolean overwrite) throws IOException {
    checkFileLevel(l);
    long handle = call(() -> conn.call().create(SidecarCreateRequest.newBuilder().setKey(l.key())
        .setExclusive(!overwrite).build())).getHandle();
    return new FSDataOutputStream(new OzrsOutputStream(conn, handle, statistics, l.toString()),
        null);
  }

  @Override
  public FSDataOutputStream append(Path f, int bufferSize, Progressable progress)
      throws IOException {
    throw new UnsupportedOperationException("append is not supported by " + SCHEME);
  }

  // ------------------------------------------------------------- namespace

  @Override
  public boolean rename(Path src, Path dst) throws IOException {
    Loc s = loc(src);
    Loc d = loc(dst);
    if (!s.inBucket()) {
      return false;
    }
    if (d.depth < 2 || !s.volume.equals(d.volume) || !s.bucket.equals(d.bucket)) {
      throw new IOException("cannot rename " + s + " to " + d + ": renames stay within a bucket");
    }
    try {
      call(() -> conn.om().rename(RenameRequest.newBuilder().setFrom(s.fs()).setTo(d.path).build()));
      return true;
    } catch (FileNotFoundException | FileAlreadyExistsException e) {
      return false;
    } catch (IOException e) {
      if (e.getCause() instanceof StatusRuntimeException
          && ((StatusRuntimeException) e.getCause()).getStatus().getCode() == Status.Code.INVALID_ARGUMENT) {
        return false;
      }
      throw e;
    }
  }

  @Override
  public boolean delete(Path f, boolean recursive) throws IOException {
    Loc l = loc(f);
    if (!l.inBucket()) {
      if (l.depth == 0) {
        // The root is never deleted; its volumes are removed with `ozone sh`.
        return false;
      }
      throw new PathIOException(l.toString(), "volumes and buckets are deleted with `ozone sh`");
    }
    try {
      call(() -> conn.om().deletePath(DeletePathRequest.newBuilder().setPath(l.fs())
          .setRecursive(recursive).build()));
      return true;
    } catch (FileNotFoundException e) {
      return false;
    }
  }

  @Override
  public boolean mkdirs(Path f, FsPermission permission) throws IOException {
    Loc l = loc(f);
    if (!l.inBucket()) {
      try {
        FileStatus st = getFileStatus(f);
        if (st.isDirectory()) {
          return true;
        }
      } catch (FileNotFoundException e) {
        // below
      }
      throw new PathIOException(l.toString(), "volumes and buckets are created with `ozone sh`");
    }
    try {
      call(() -> conn.om().mkdirs(MkdirsRequest.newBuilder().setPath(l.fs()).build()));
      return true;
    } catch (FileAlreadyExistsException e) {
      throw new FileAlreadyExistsException(l + " exists and is a file");
    }
  }

  @Override
  public FileStatus getFileStatus(Path f) throws IOException {
    Loc l = loc(f);
    Path q = makeQualified(f);
    if (l.depth == 0) {
      return dirStatus(q, 0);
    }
    if (l.depth == 1) {
      for (VolumeInfo v : call(() -> conn.om().listVolumes(ListVolumesRequest.getDefaultInstance()))
          .getVolumesList()) {
        if (v.getName().equals(l.volume)) {
          return dirStatus(q, v.getCreatedMs());
        }
      }
      throw new FileNotFoundException("volume " + l + " does not exist");
    }
    io.ozoners.proto.FileStatus s;
    try {
      s = call(() -> conn.om().getFileStatus(
          GetFileStatusRequest.newBuilder().setPath(l.fs()).build())).getStatus();
    } catch (ParentNotDirectoryException e) {
      // A file on the way: nothing lives under it (as in HDFS).
      throw (FileNotFoundException) new FileNotFoundException(l + ": " + e.getMessage()).initCause(e);
    }
    return status(l, s);
  }

  @Override
  public FileStatus[] listStatus(Path f) throws IOException {
    List<FileStatus> out = new ArrayList<>();
    RemoteIterator<FileStatus> it = listStatusIterator(f);
    while (it.hasNext()) {
      out.add(it.next());
    }
    return out.toArray(new FileStatus[0]);
  }

  @Override
  public RemoteIterator<FileStatus> listStatusIterator(Path f) throws IOException {
    Loc l = loc(f);
    Path q = makeQualified(f);
    if (l.depth == 0) {
      List<FileStatus> v = new ArrayList<>();
      for (VolumeInfo vi : call(() -> conn.om().listVolumes(ListVolumesRequest.getDefaultInstance()))
          .getVolumesList()) {
        v.add(dirStatus(new Path(q, vi.getName()), vi.getCreatedMs()));
      }
      return iterator(v);
    }
    if (l.depth == 1) {
      getFileStatus(f);
      List<FileStatus> v = new ArrayList<>();
      for (BucketInfo b : call(() -> conn.om().listBuckets(
          ListBucketsRequest.newBuilder().setVolume(l.volume).build())).getBucketsList()) {
        v.add(dirStatus(new Path(q, b.getName()), b.getCreatedMs()));
      }
      return iterator(v);
    }
    FileStatus self = getFileStatus(f);
    if (!self.isDirectory()) {
      return iterator(List.of(self));
    }
    return new Pages(l);
  }

  private static RemoteIterator<FileStatus> iterator(List<FileStatus> list) {
    return new RemoteIterator<FileStatus>() {
      private int i;

      @Override
      public boolean hasNext() {
        return i < list.size();
      }

      @Override
      public FileStatus next() {
        if (i >= list.size()) {
          throw new NoSuchElementException();
        }
        return list.get(i++);
      }
    };
  }

  /** A directory listed a page at a time: a directory of any size never loads whole. */
  private final class Pages implements RemoteIterator<FileStatus> {
    private final Loc dir;
    private List<io.ozoners.proto.FileStatus> page = List.of();
    private int i;
    private String after = "";
    private boolean done;

    Pages(Loc dir) {
      this.dir = dir;
    }

    @Override
    public boolean hasNext() throws IOException {
      if (i < page.size()) {
        return true;
      }
      if (done) {
        return false;
      }
      String start = after;
      page = call(() -> conn.om().listStatus(ListStatusRequest.newBuilder().setPath(dir.fs())
          .setStartAfter(start).setLimit(PAGE).build())).getEntriesList();
      i = 0;
      if (page.size() < PAGE) {
        done = true;
      }
      if (!page.isEmpty()) {
        String last = page.get(page.size() - 1).getPath();
        after = last.substring(last.lastIndexOf('/') + 1);
      }
      return !page.isEmpty();
    }

    @Override
    public FileStatus next() throws IOException {
      if (!hasNext()) {
        throw new NoSuchElementException();
      }
      return status(dir, page.get(i++));
    }
  }

  @Override
  public ContentSummary getContentSummary(Path f) throws IOException {
    Loc l = loc(f);
    if (l.depth < 2) {
      return super.getContentSummary(f);
    }
    io.ozoners.proto.ContentSummary s = call(() -> conn.om().getContentSummary(
        ContentSummaryRequest.newBuilder().setPath(l.fs()).build()));
    return new ContentSummary.Builder().length(s.getLength()).fileCount(s.getFileCount())
        .directoryCount(s.getDirectoryCount()).spaceConsumed(s.getLength() * replication).build();
  }

  /**
   * The file's composite CRC (the CRC32C or CRC32 of its bytes, from block
   * metadata, no data read): what `ozone sh key checksum` prints, and what
   * HDFS's COMPOSITE_CRC mode gives for the same bytes.
   */
  @Override
  public FileChecksum getFileChecksum(Path f) throws IOException {
    Loc l = loc(f);
    if (!l.inBucket()) {
      throw new FileNotFoundException(l + " is not a file");
    }
    SidecarFileChecksum c = call(() -> conn.call().fileChecksum(
        SidecarChecksumRequest.newBuilder().setKey(l.key()).build()));
    DataChecksum.Type t;
    switch (c.getType()) {
      case CRC32C:
        t = DataChecksum.Type.CRC32C;
        break;
      case CRC32:
        t = DataChecksum.Type.CRC32;
        break;
      default:
        return null;
    }
    return new CompositeCrcFileChecksum(c.getCrc(), t, c.getBytesPerChecksum());
  }

  @Override
  public FileChecksum getFileChecksum(Path f, long length) throws IOException {
    FileStatus st = getFileStatus(f);
    if (length < st.getLen()) {
      // A prefix's CRC would need its bytes; callers comparing whole files
      // (DistCp) pass the full length.
      return null;
    }
    return getFileChecksum(f);
  }

  // ------------------------------------------------------------- leases

  /**
   * Closes the file at its last synced length if its writer is gone. True: the OM closes the file
   * within the call, with no block recovery left running (HDFS's false, "recovery started", does
   * not arise); a failure is an exception.
   */
  @Override
  public boolean recoverLease(Path file) throws IOException {
    return leaseCall(file, p -> {
      conn.om().recoverLease(RecoverLeaseRequest.newBuilder().setPath(p).build());
      return true;
    });
  }

  @Override
  public boolean isFileClosed(Path file) throws IOException {
    return leaseCall(file, p -> conn.om().isFileClosed(IsFileClosedRequest.newBuilder().setPath(p).build())
        .getClosed());
  }

  /** A lease call on a file, with HDFS's errors for a missing path or a directory. */
  private boolean leaseCall(Path file, java.util.function.Function<FsPath, Boolean> f) throws IOException {
    Loc l = loc(file);
    if (!l.inBucket()) {
      throw new FileNotFoundException("Path is not a file: " + l);
    }
    FsPath p = l.fs();
    try {
      return call(() -> f.apply(p));
    } catch (IOException e) {
      throw leaseError(l, e);
    }
  }

  /** HDFS's messages for lease calls on a missing path or a directory. */
  private static IOException leaseError(Loc l, IOException e) {
    String m = e.getMessage() == null ? "" : e.getMessage();
    IOException r;
    if (e instanceof FileNotFoundException || e instanceof ParentNotDirectoryException) {
      r = new FileNotFoundException("File does not exist: " + l + " (" + m + ")");
    } else if (m.contains("is a directory")) {
      r = new FileNotFoundException("Path is not a file: " + l);
    } else {
      return e;
    }
    r.initCause(e);
    return r;
  }

  @Override
  public boolean hasPathCapability(Path path, String capability) throws IOException {
    switch (capability.toLowerCase(java.util.Locale.ROOT)) {
      case CommonPathCapabilities.LEASE_RECOVERABLE:
        return true;
      case CommonPathCapabilities.FS_APPEND:
      case CommonPathCapabilities.FS_CONCAT:
      case CommonPathCapabilities.FS_PERMISSIONS:
      case CommonPathCapabilities.FS_SNAPSHOTS:
      case CommonPathCapabilities.FS_STORAGEPOLICY:
      case CommonPathCapabilities.FS_XATTRS:
      case CommonPathCapabilities.FS_ACLS:
      case CommonPathCapabilities.FS_TRUNCATE:
      case CommonPathCapabilities.FS_SYMLINKS:
        return false;
      default:
        return super.hasPathCapability(path, capability);
    }
  }

  private <T> T call(java.util.function.Supplier<T> f) throws IOException {
    return Rpc.call(conn, f);
  }

  @Override
  public String toString() {
    return "OzrsFileSystem{" + uri + ", sidecar=" + conn.socket + ", verify="
        + (verifyChecksum == null ? "policy" : verifyChecksum) + "}";
  }
}
