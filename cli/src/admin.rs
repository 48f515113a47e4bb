//! `ozone admin`: datanodes, decommissioning, replication status.

use ozone_proto::NodeState;

use crate::args::*;
use crate::sh::human;

pub(crate) fn state_name(s: i32) -> &'static str {
    match NodeState::try_from(s).unwrap_or(NodeState::Unspecified) {
        NodeState::Healthy => "HEALTHY",
        NodeState::Stale => "STALE",
        NodeState::Dead => "DEAD",
        NodeState::Unspecified => "UNKNOWN",
    }
}

pub(crate) async fn admin(cli: &Cli, cmd: &AdminCmd) -> anyhow::Result<()> {
    use ozone_proto::OperationalState as Op;
    let client = cli.client()?;
    match cmd {
        AdminCmd::Datanode { cmd } => match cmd {
            DatanodeCmd::List => {
                println!(
                    "{:<36}  {:<21}  {:<12}  {:<8}  {:<15}  {:>10}  {:>10}",
                    "ID", "ADDRESS", "NODE", "STATE", "OPERATIONAL", "CAPACITY", "USED"
                );
                for d in client.list_datanodes().await? {
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
            DatanodeCmd::Decommission { datanode }
            | DatanodeCmd::Maintenance { datanode }
            | DatanodeCmd::Recommission { datanode } => {
                let state = match cmd {
                    DatanodeCmd::Decommission { .. } => Op::Decommissioning,
                    DatanodeCmd::Maintenance { .. } => Op::InMaintenance,
                    _ => Op::InService,
                };
                let d = client.set_operational_state(datanode, state).await?;
                println!("{} ({}): {}", d.id, d.address, op_name(d.operational_state));
            }
            DatanodeCmd::Status { datanode } => {
                let s = client.datanode_status(datanode).await?;
                let d = s.datanode.unwrap_or_default();
                println!("id:                 {}", d.id);
                println!("address:            {}", d.address);
                println!("node:               {}", d.node_name);
                println!("health:             {}", state_name(d.state));
                println!("operational state:  {}", op_name(d.operational_state));
                println!("replicas:           {}", s.replicas);
                println!("needed elsewhere:   {}", s.needed_elsewhere);
                println!("copies in flight:   {}", s.copies_in_flight);
            }
        },
        AdminCmd::Replication {
            cmd: ReplicationCmd::Status { top },
        } => {
            let s = client.replication_status(*top).await?;
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
