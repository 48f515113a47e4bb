package io.ozoners.hadoop.fs;

import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.io.IOException;
import java.util.function.Supplier;

/** Sidecar calls: gRPC statuses become IOExceptions; an unreachable sidecar is retried for a while. */
final class Rpc {
  /** How long a call waits for an unreachable sidecar (a restart takes a second or two). */
  static volatile long retryMillis = 30_000;

  private Rpc() {}

  static <T> T call(SidecarConnection conn, Supplier<T> f) throws IOException {
    long end = System.currentTimeMillis() + retryMillis;
    for (;;) {
      try {
        return f.get();
      } catch (StatusRuntimeException e) {
        if (e.getStatus().getCode() != Status.Code.UNAVAILABLE || System.currentTimeMillis() >= end
            || (e.getStatus().getDescription() != null
                && e.getStatus().getDescription().contains("draining"))) {
          throw Errors.of(e, conn.socket);
        }
        conn.reconnect();
        SidecarConnection.sleep(200);
      } catch (RuntimeException e) {
        throw new IOException("sidecar " + conn.socket + ": " + e, e);
      }
    }
  }
}
