//! `seedlog groups list|describe`: Kafka's `kafka-consumer-groups --list` and `--describe`.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Context;
use clap::Subcommand;
use seedlog::runtime::admin::{
    describe_group, find_group_coordinator, list_groups, list_offsets, metadata,
};
use seedlog::runtime::client::ClientConnection;
use seedlog::types::TopicPartition;

use crate::cli::ADMIN_TIMEOUT;

#[derive(Subcommand)]
pub(crate) enum GroupsAction {
    /// Every group of every broker: id, protocol type and state.
    List {
        #[arg(long, default_value = "localhost:9092")]
        bootstrap_server: String,
    },
    /// A group's state, members, committed offsets, log end offsets and lag.
    Describe {
        #[arg(long, default_value = "localhost:9092")]
        bootstrap_server: String,
        #[arg(long)]
        group: String,
    },
}

pub(crate) async fn run(action: GroupsAction) -> anyhow::Result<()> {
    match action {
        GroupsAction::List { bootstrap_server } => list(&bootstrap_server).await,
        GroupsAction::Describe {
            bootstrap_server,
            group,
        } => describe(&bootstrap_server, &group).await,
    }
}

/// Every broker's `host:port` and the leader of each partition of `topics`.
async fn cluster(
    bootstrap_server: &str,
    topics: Option<&[String]>,
) -> anyhow::Result<(BTreeMap<i32, String>, BTreeMap<TopicPartition, i32>)> {
    let mut connection = ClientConnection::connect(bootstrap_server, "seedlog-cli").await?;
    let response = metadata(&mut connection, topics, ADMIN_TIMEOUT).await?;
    let brokers = response
        .brokers
        .iter()
        .map(|broker| (broker.node_id.0, format!("{}:{}", broker.host, broker.port)))
        .collect();
    let leaders = response
        .topics
        .iter()
        .flat_map(|topic| {
            let name = topic
                .name
                .as_ref()
                .map(|name| name.to_string())
                .unwrap_or_default();
            topic.partitions.iter().map(move |partition| {
                (
                    TopicPartition::new(name.clone(), partition.partition_index),
                    partition.leader_id.0,
                )
            })
        })
        .collect();
    Ok((brokers, leaders))
}

async fn list(bootstrap_server: &str) -> anyhow::Result<()> {
    let (brokers, _) = cluster(bootstrap_server, Some(&[])).await?;
    let mut groups = Vec::new();
    for address in brokers.values() {
        let mut connection = ClientConnection::connect(address, "seedlog-cli").await?;
        groups.extend(
            list_groups(&mut connection, ADMIN_TIMEOUT)
                .await
                .with_context(|| format!("ListGroups of {address}"))?,
        );
    }
    groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
    println!("GROUP\tTYPE\tSTATE");
    for group in groups {
        println!(
            "{}\t{}\t{}",
            group.group_id, group.protocol_type, group.state
        );
    }
    Ok(())
}

async fn describe(bootstrap_server: &str, group: &str) -> anyhow::Result<()> {
    let mut connection = ClientConnection::connect(bootstrap_server, "seedlog-cli").await?;
    let coordinator = find_group_coordinator(&mut connection, group, ADMIN_TIMEOUT).await?;
    let mut coordinator = ClientConnection::connect(&coordinator, "seedlog-cli").await?;
    let description = describe_group(&mut coordinator, group, ADMIN_TIMEOUT).await?;
    let mut owners: BTreeMap<TopicPartition, usize> = BTreeMap::new();
    for (index, member) in description.members.iter().enumerate() {
        for partition in &member.partitions {
            owners.insert(partition.clone(), index);
        }
    }
    let partitions: BTreeSet<TopicPartition> = description
        .offsets
        .keys()
        .chain(owners.keys())
        .cloned()
        .collect();
    let ends = log_ends(bootstrap_server, &partitions).await?;
    println!(
        "Consumer group '{group}' is {} ({} members, assignor {}).",
        description.state,
        description.members.len(),
        if description.protocol.is_empty() {
            "-"
        } else {
            &description.protocol
        }
    );
    println!("GROUP\tTOPIC\tPARTITION\tCURRENT-OFFSET\tLOG-END-OFFSET\tLAG\tCONSUMER-ID\tHOST\tCLIENT-ID");
    let unknown = || "-".to_owned();
    for partition in partitions {
        let committed = description
            .offsets
            .get(&partition)
            .copied()
            .filter(|offset| *offset >= 0);
        let end = ends.get(&partition).copied();
        let lag = committed.zip(end).map_or_else(unknown, |(committed, end)| {
            (end - committed).max(0).to_string()
        });
        let (member, host, client) = owners.get(&partition).map_or_else(
            || (unknown(), unknown(), unknown()),
            |index| {
                let member = &description.members[*index];
                (
                    member.member_id.clone(),
                    member.client_host.clone(),
                    member.client_id.clone(),
                )
            },
        );
        println!(
            "{group}\t{}\t{}\t{}\t{}\t{lag}\t{member}\t{host}\t{client}",
            partition.topic,
            partition.partition,
            committed.map_or_else(unknown, |offset| offset.to_string()),
            end.map_or_else(unknown, |offset| offset.to_string()),
        );
    }
    Ok(())
}

/// The log end offset of each of `partitions`, asked of its leader.
async fn log_ends(
    bootstrap_server: &str,
    partitions: &BTreeSet<TopicPartition>,
) -> anyhow::Result<BTreeMap<TopicPartition, i64>> {
    let topics: Vec<String> = partitions
        .iter()
        .map(|p| p.topic.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let (brokers, leaders) = cluster(bootstrap_server, Some(&topics)).await?;
    let mut by_leader: BTreeMap<i32, Vec<TopicPartition>> = BTreeMap::new();
    for partition in partitions {
        if let Some(leader) = leaders.get(partition) {
            by_leader
                .entry(*leader)
                .or_default()
                .push(partition.clone());
        }
    }
    let mut ends = BTreeMap::new();
    for (leader, asked) in by_leader {
        let Some(address) = brokers.get(&leader) else {
            continue;
        };
        let mut connection = ClientConnection::connect(address, "seedlog-cli").await?;
        for (partition, end) in list_offsets(&mut connection, &asked, -1, 0, ADMIN_TIMEOUT).await? {
            if let Ok(end) = end {
                ends.insert(partition, end);
            }
        }
    }
    Ok(ends)
}
