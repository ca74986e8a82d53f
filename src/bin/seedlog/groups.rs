//! `seedlog groups list|describe`: Kafka's `kafka-consumer-groups --list` and `--describe`;
//! and `seedlog consume --group`, the console consumer as a group member.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::Context;
use clap::Subcommand;
use seedlog::client::group::{recovery, Recovery};
use seedlog::config::Configurable;
use seedlog::runtime::admin::{
    describe_group, find_group_coordinator, list_groups, list_offsets, metadata,
};
use seedlog::runtime::client::{ClientConnection, ClientError};
use seedlog::runtime::consumer::{Consumer, ConsumerRecord};
use seedlog::runtime::group::{take_positions, CommitOutcome, GroupMember, RebalanceListener};
use seedlog::types::TopicPartition;
use tokio::time::Instant;

use crate::cli::{print_records, ConsumeArgs, ADMIN_TIMEOUT};

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
                    TopicPartition::new(name.as_str(), partition.partition_index),
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
        .map(|p| p.topic.to_string())
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

/// `seedlog consume --group`: kafka-console-consumer's `--group`. The member joins the group
/// (the assignor is `partition.assignment.strategy`, settable with `--consumer-property`), starts
/// each assigned partition at the group's committed offset (`auto.offset.reset` where none is)
/// and prints. It commits as Kafka's documentation advises: asynchronously after each poll, and
/// synchronously when partitions are revoked and on exit (then it leaves the group). A crash
/// between printing and committing prints those records again (at least once).
pub(crate) async fn consume(args: ConsumeArgs, group: &str) -> anyhow::Result<()> {
    let mut config = args.config()?;
    config.set("group.id", group)?;
    let mut member = GroupMember::new(&config, vec![args.topic.clone()]);
    let backoff = Duration::from_millis(config.retry_backoff_ms.max(1));
    let mut consumer = Consumer::new(config)?;
    let idle = Duration::from_millis(args.timeout_ms);
    let mut idle_deadline = Instant::now() + idle;
    let mut printed = 0;
    // The next offset of each held partition, after what was printed.
    let mut positions = CommitOnRevoke::default();
    // The assignment just joined, until its committed offsets are fetched (retried, as Kafka's
    // consumer does, rather than read from `auto.offset.reset`).
    let mut unpositioned: Option<Vec<TopicPartition>> = None;
    let outcome = loop {
        report_commits(member.take_commit_outcomes());
        if Instant::now() >= idle_deadline {
            break Ok(());
        }
        if member.needs_rejoin() {
            match member.ensure_active(&mut positions).await {
                Ok(Some((_, assignment))) => {
                    // Nothing is read until the new partitions stand at their commits.
                    consumer.assign(&[]);
                    unpositioned = Some(assignment);
                }
                Ok(None) => {}
                Err(error) if fatal(&error) => break Err(error.into()),
                Err(_) => tokio::time::sleep(backoff).await,
            }
            continue;
        }
        match member.heartbeat_if_due().await {
            Ok(()) => {}
            Err(error) if fatal(&error) => break Err(error.into()),
            Err(_) => tokio::time::sleep(backoff).await,
        }
        if member.needs_rejoin() {
            continue;
        }
        if let Some(assignment) = &unpositioned {
            match position(&mut member, &mut consumer, assignment).await {
                Ok(()) => unpositioned = None,
                Err(error) if fatal(&error) => break Err(error.into()),
                Err(_) => tokio::time::sleep(backoff).await,
            }
            continue;
        }
        let wait = idle_deadline
            .saturating_duration_since(Instant::now())
            .min(member.until_heartbeat())
            .max(Duration::from_millis(1));
        let polled = consumer.poll(wait).await?;
        for error in &polled.errors {
            eprintln!("{}: {:?}: {}", error.partition, error.error, error.message);
        }
        if polled.records.is_empty() {
            continue;
        }
        idle_deadline = Instant::now() + idle;
        let mut fresh = BTreeMap::new();
        let done = print_noting(&polled.records, &args, &mut printed, &mut fresh)?;
        positions.0.extend(fresh.clone());
        member.note_offset_epochs(&consumer, fresh.keys());
        member.commit_async(fresh).await;
        if done {
            break Ok(());
        }
    };
    // Leaving revokes what the member holds: the revocation commits it synchronously.
    member.leave(&mut positions).await;
    report_commits(member.take_commit_outcomes());
    outcome
}

/// The console consumer's rebalance listener: the printed positions of the partitions it holds,
/// committed synchronously when they are revoked (Kafka's advice for `commitAsync` users) and
/// dropped when lost (a commit would be refused).
#[derive(Default)]
struct CommitOnRevoke(BTreeMap<TopicPartition, i64>);

impl RebalanceListener for CommitOnRevoke {
    async fn on_partitions_revoked(
        &mut self,
        member: &mut GroupMember,
        partitions: &[TopicPartition],
    ) {
        let offsets = take_positions(&mut self.0, partitions);
        if offsets.is_empty() || member.generation() < 0 {
            return;
        }
        if let Err(error) = member.commit(&offsets).await {
            eprintln!("commit on revocation failed: {error}");
        }
    }

    async fn on_partitions_assigned(&mut self, _: &mut GroupMember, _: &[TopicPartition]) {}

    async fn on_partitions_lost(&mut self, _: &mut GroupMember, partitions: &[TopicPartition]) {
        take_positions(&mut self.0, partitions);
    }
}

/// Reports the asynchronous commits that failed (a later commit covers them).
fn report_commits(outcomes: Vec<CommitOutcome>) {
    for outcome in outcomes {
        if let Err(error) = outcome.result {
            eprintln!(
                "asynchronous commit in generation {} failed: {error}",
                outcome.generation
            );
        }
    }
}

/// Whether a group call's error ends the consumer: a coordinator error Kafka's consumer does not
/// recover from (an unknown member, a coordinator still loading and lost connections are
/// retried).
fn fatal(error: &ClientError) -> bool {
    matches!(error, ClientError::Kafka { error, .. } if recovery(*error) == Recovery::Fatal)
}

/// Prints records up to `--max-messages`, noting each printed record's next offset for the
/// commit; returns whether `--max-messages` was reached.
fn print_noting(
    records: &[ConsumerRecord],
    args: &ConsumeArgs,
    printed: &mut usize,
    uncommitted: &mut BTreeMap<TopicPartition, i64>,
) -> anyhow::Result<bool> {
    for record in records {
        let done = print_records(std::slice::from_ref(record), args, printed)?;
        uncommitted.insert(record.topic_partition.clone(), record.offset + 1);
        if done {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Assigns `assignment` to the consumer at the group's committed offsets (`auto.offset.reset`
/// where none is committed); on an error the consumer is left without partitions.
async fn position(
    member: &mut GroupMember,
    consumer: &mut Consumer,
    assignment: &[TopicPartition],
) -> Result<(), ClientError> {
    let committed = member.committed(assignment).await?;
    consumer.assign(assignment);
    for (partition, (offset, epoch)) in committed {
        consumer.seek_with_epoch(&partition, offset, epoch);
    }
    Ok(())
}
