package io.ozoners.hadoop.fs.contract;

import io.ozoners.hadoop.fs.LocalCluster;
import java.io.IOException;
import java.net.URI;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.contract.AbstractFSContract;

/** The ozrs FileSystem under Hadoop's contract tests: contract/ozrs.xml, a real local cluster. */
public class OzrsContract extends AbstractFSContract {
  private FileSystem fs;

  public OzrsContract(Configuration conf) {
    super(conf);
    addConfResource("contract/ozrs.xml");
  }

  @Override
  public void init() throws IOException {
    super.init();
    LocalCluster c = LocalCluster.get();
    Configuration conf = getConf();
    conf.set("ozone.client.sidecar.socket", c.sidecars.get("node1").socket.getAbsolutePath());
    fs = FileSystem.get(URI.create("ozrs://test/"), conf);
  }

  @Override
  public FileSystem getTestFileSystem() {
    return fs;
  }

  @Override
  public String getScheme() {
    return "ozrs";
  }

  @Override
  public Path getTestPath() {
    return new Path("/vol/fsb/test");
  }
}
