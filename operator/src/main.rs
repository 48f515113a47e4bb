//! `ozone-operator`: `crd` prints the CRD; `render -f FILE` prints every
//! object the operator would apply for a cluster resource.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "ozone-operator", version, about = "Ozone operator")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Prints the OzoneCluster CustomResourceDefinition.
    Crd,
    /// Prints, offline, the objects for an OzoneCluster resource.
    Render {
        /// The resource (YAML).
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// Namespace when the resource names none.
        #[arg(long, default_value = "default")]
        namespace: String,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().cmd {
        Cmd::Crd => print!("{}", ozone_operator::crd_yaml()?),
        Cmd::Render { file, namespace } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            let mut c: ozone_operator::crd::OzoneCluster = serde_yaml::from_str(&text)
                .with_context(|| format!("parsing {}", file.display()))?;
            c.metadata.namespace.get_or_insert(namespace);
            c.metadata
                .uid
                .get_or_insert_with(|| "00000000-0000-0000-0000-000000000000".into());
            let objs = ozone_operator::builders::build(&c)?;
            print!("{}", objs.to_yaml()?);
        }
    }
    Ok(())
}
