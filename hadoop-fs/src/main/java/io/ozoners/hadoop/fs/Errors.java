package io.ozoners.hadoop.fs;

import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.io.File;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.file.AccessDeniedException;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.ParentNotDirectoryException;
import org.apache.hadoop.fs.PathIsNotEmptyDirectoryException;

/** gRPC statuses of the sidecar as the IOExceptions Hadoop callers expect. */
final class Errors {
  private Errors() {}

  static IOException of(StatusRuntimeException e, File socket) {
    Status s = e.getStatus();
    String m = s.getDescription() == null ? s.getCode().toString() : s.getDescription();
    IOException io = fromCode(s.getCode().value(), m, socket);
    io.initCause(e);
    return io;
  }

  static IOException fromCode(int code, String m, File socket) {
    switch (Status.fromCodeValue(code).getCode()) {
      case NOT_FOUND:
        return new FileNotFoundException(m);
      case ALREADY_EXISTS:
        return new FileAlreadyExistsException(m);
      case PERMISSION_DENIED:
      case UNAUTHENTICATED:
        return new AccessDeniedException(m);
      case FAILED_PRECONDITION:
        if (m.contains("not a directory")) {
          return new ParentNotDirectoryException(m);
        }
        if (m.contains("not empty")) {
          return new PathIsNotEmptyDirectoryException(m);
        }
        return new IOException(m);
      case UNAVAILABLE:
        return new IOException("sidecar " + socket + " unavailable: " + m);
      case DEADLINE_EXCEEDED:
        return new IOException("sidecar " + socket + " did not answer in time: " + m);
      case UNKNOWN:
      case CANCELLED:
      case INTERNAL:
        // Transport failures (a connection cut mid-call) carry these.
        return new IOException("sidecar " + socket + ": " + m);
      default:
        return new IOException(m);
    }
  }
}
