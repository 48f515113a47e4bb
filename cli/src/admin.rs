//! `ozone admin`: datanodes, decommissioning, replication status.

use ozone_client::KeyAccess;
use ozone_proto::{DatanodeDetails, NodeState};
use serde_json::{Value, json};

use crate::args::*;
use crate::output::{self, human};

pub(crate) fn state_name(s: i32) -> &'static str {
    match NodeState::try_from(s).unwrap_or(NodeState::Unspecified) {
        NodeState::Healthy => "HEALTHY",
        NodeState::Stale => "STALE",
        NodeState::Dead => "DEAD",
        NodeState::Unspecified => "UNKNOWN",
    }
}

fn datanode_json(d: &DatanodeDetails) -> Value {
    json!({
        "id": d.id,
        "address": d.address,
        "node": d.node_name,
        "host": d.host_name,
        "state": state_name(d.state),
        "operationalState": op_name(d.operational_state),
        "capacity": d.capacity,
        "used": d.used,
    })
}

pub(crate) async fn admin(cli: &Cli, cmd: &AdminCmd) -> anyhow::Result<()> {
    use ozone_proto::OperationalState as Op;
    let client = cli.client()?;
    match cmd {
        AdminCmd::Datanode { cmd } => match cmd {
            DatanodeCmd::List => {
                let dns = client.om().list_datanodes().await?;
                if cli.json {
                    output::json(&Value::Array(dns.iter().map(datanode_json).collect()));
                    return Ok(());
                }
                println!(
                    "{:<36}  {:<21}  {:<12}  {:<8}  {:<15}  {:>10}  {:>10}",
                    "ID", "ADDRESS", "NODE", "STATE", "OPERATIONAL", "CAPACITY", "USED"
                );
                for d in dns {
                    println!(
                        "{:<36}  {:<21}  {:<12}  {:<8}  {:<15}  {:>10}  {:>10}",
                        d.id,
                        d.address,
                        d.node_name,
                        state_name(d.state),
                        op_name(d.operational_state),
                        human(d.capacity),
                        human(d.used)
                    );
                }
            }
            DatanodeCmd::Decommission { datanode, force } => {
                let d = client
                    .set_operational_state_with(datanode, Op::Decommissioning, *force)
                    .await?;
                println!("{} ({}): {}", d.id, d.address, op_name(d.operational_state));
                if *force {
                    let s = client.datanode_status(datanode).await?;
                    if !s.blocked.is_empty() {
                        output::warn(&s.blocked);
                    }
                }
            }
            DatanodeCmd::Maintenance { datanode } | DatanodeCmd::Recommission { datanode } => {
                let state = match cmd {
                    DatanodeCmd::Maintenance { .. } => Op::InMaintenance,
                    _ => Op::InService,
                };
                let d = client.set_operational_state(datanode, state).await?;
                println!("{} ({}): {}", d.id, d.address, op_name(d.operational_state));
            }
            DatanodeCmd::Status { datanode } => {
                let s = client.datanode_status(datanode).await?;
                let d = s.datanode.unwrap_or_default();
                if cli.json {
                    let mut v = datanode_json(&d);
                    v["replicas"] = json!(s.replicas);
                    v["neededElsewhere"] = json!(s.needed_elsewhere);
                    v["copiesInFlight"] = json!(s.copies_in_flight);
                    v["blocked"] = json!(s.blocked);
                    output::json(&v);
                    return Ok(());
                }
                println!("id:                 {}", d.id);
                println!("address:            {}", d.address);
                println!("node:               {}", d.node_name);
                println!("health:             {}", state_name(d.state));
                println!("operational state:  {}", op_name(d.operational_state));
                println!("replicas:           {}", s.replicas);
                println!("needed elsewhere:   {}", s.needed_elsewhere);
                println!("copies in flight:   {}", s.copies_in_flight);
                if !s.blocked.is_empty() {
                    println!("blocked:            {}", s.blocked);
                }
            }
        },
        AdminCmd::Replication {
            cmd: ReplicationCmd::Status { top },
        } => {
            let s = client.replication_status(*top).await?;
            if cli.json {
                output::json(&json!({
                    "blocks": s.blocks,
                    "healthy": s.healthy,
                    "underReplicated": s.under_replicated,
                    "overReplicated": s.over_replicated,
                    "misReplicated": s.mis_replicated,
                    "missing": s.missing,
                    "copiesInFlight": s.copies_in_flight,
                    "copiesDone": s.copies_done,
                    "copiesFailed": s.copies_failed,
                    "bytesCopied": s.bytes_copied,
                    "reportsComplete": s.reports_complete,
                    "lastPassTime": (s.last_pass_ms > 0).then(|| output::time(s.last_pass_ms)),
                    "top": s.top.iter().map(|h| json!({
                        "block": h.block.map(|b| b.display()).unwrap_or_default(),
                        "healthy": h.healthy,
                        "wanted": h.wanted,
                        "key": h.key,
                        "problems": h.problems,
                    })).collect::<Vec<_>>(),
                }));
                return Ok(());
            }
            println!("blocks:             {}", s.blocks);
            println!("healthy:            {}", s.healthy);
            println!("under-replicated:   {}", s.under_replicated);
            println!("over-replicated:    {}", s.over_replicated);
            println!("mis-replicated:     {}", s.mis_replicated);
            println!("missing:            {}", s.missing);
            println!("copies in flight:   {}", s.copies_in_flight);
            println!("copies done:        {}", s.copies_done);
            println!("copies failed:      {}", s.copies_failed);
            println!("bytes copied:       {}", human(s.bytes_copied));
            println!(
                "reports:            {}",
                if s.reports_complete {
                    "every live datanode reported"
                } else {
                    "waiting for datanode reports"
                }
            );
            if s.last_pass_ms == 0 {
                println!("last pass:          none yet");
            } else {
                println!("last pass:          {}", output::time(s.last_pass_ms));
            }
            if !s.top.is_empty() {
                println!();
                println!("{:<24}  {:>7}  {:<40}  PROBLEMS", "BLOCK", "HEALTHY", "KEY");
                for h in &s.top {
                    println!(
                        "{:<24}  {:>7}  {:<40}  {}",
                        h.block.map(|b| b.display()).unwrap_or_default(),
                        format!("{}/{}", h.healthy, h.wanted),
                        h.key,
                        h.problems.join("; ")
                    );
                }
            }
        }
    }
    Ok(())
}

/// The operational state's name, as Ozone prints it.
pub(crate) fn op_name(s: i32) -> &'static str {
    match ozone_proto::OperationalState::try_from(s) {
        Ok(ozone_proto::OperationalState::Decommissioning) => "DECOMMISSIONING",
        Ok(ozone_proto::OperationalState::Decommissioned) => "DECOMMISSIONED",
        Ok(ozone_proto::OperationalState::InMaintenance) => "IN_MAINTENANCE",
        _ => "IN_SERVICE",
    }
}
