//! The seed harness: one madsim runtime per seed (with the [`SimDisks`] plugin), on a fresh OS
//! thread, running brokers, clients and the nemesis as simulated nodes, then the checkers.
//!
//! A run has a safety phase (the workload with the scripted faults) and a liveness phase
//! (faults healed, crashed nodes restarted, producers finish, then a final read of every
//! partition), as in TigerBeetle's simulator.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use madsim::net::NetSim;
use madsim::rand::Rng;
use madsim::runtime::{Handle, Runtime};
use madsim::task::NodeId;
use seedlog::config::broker::ProcessRole;
use seedlog::config::{BrokerConfig, Configurable};
use seedlog::runtime::server::{run_broker, run_controller, BrokerObserver, ServerOptions};
use seedlog::storage::memory::{CrashLevel, DiskFaults, FsyncFailure};
use seedlog::types::{BrokerId, TopicPartition};
use tokio::sync::{mpsc, Notify};

use crate::checker::FINAL_READER;
use crate::clock::SimClocks;
use crate::cluster_monitor::ClusterMonitor;
use crate::connection_faults::ConnectionRules;
use crate::disk::SimDisks;
use crate::history::nemesis::{self, Nemesis};
use crate::history::History;
use crate::scenario::{ConnectionFaultKind, FaultAction, Scenario, Selector, TimeSpec};
use crate::workload::{
    consumer_incarnation, final_read, finished, producer_incarnation, setup_topics, Env,
    HistoryObserver, SharedMonitor, SharedProgress,
};

/// The result of one seed.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The seed.
    pub seed: u64,
    /// What happened.
    pub history: History,
    /// Simulated time the run took.
    pub simulated: Duration,
    /// A panic (invariant violation, time limit) that ended the run early.
    pub error: Option<String>,
}

const BROKER_PORT: u16 = 9092;
const SETUP_MARGIN: Duration = Duration::from_mins(1);

fn broker_ip(index: u32) -> IpAddr {
    IpAddr::from([10, 0, 0, (index + 1) as u8])
}

const CONTROLLER_PORT: u16 = 9093;
/// Controllers' node ids start here (brokers are 0..brokers).
const CONTROLLER_ID_BASE: u32 = 1000;

fn controller_ip(index: u32) -> IpAddr {
    IpAddr::from([10, 0, 3, (index + 1) as u8])
}

/// `controller.quorum.voters` of a scenario with controllers.
fn quorum_voters(scenario: &Scenario) -> Option<String> {
    (scenario.controllers > 0).then(|| {
        (0..scenario.controllers)
            .map(|index| {
                format!(
                    "{}@{}:{CONTROLLER_PORT}",
                    CONTROLLER_ID_BASE + index,
                    controller_ip(index)
                )
            })
            .collect::<Vec<_>>()
            .join(",")
    })
}

thread_local! {
    static LAST_PANIC: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Installs a panic hook that keeps the message of a seed thread's panic for its report
/// instead of printing it (a sweep of failing seeds would drown the terminal).
pub fn install_quiet_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let message = format!("{info}");
        LAST_PANIC.with(|last| *last.borrow_mut() = Some(message));
    }));
}

/// Runs `scenario` under `seed` on a fresh thread (std caches hash keys per thread, and madsim
/// state must not leak between seeds). `log` prints the broker and client logs to stderr.
pub fn run_seed(scenario: &Scenario, seed: u64, log: bool) -> RunOutcome {
    let scenario = scenario.clone();
    std::thread::Builder::new()
        .name(format!("seed-{seed}"))
        .spawn(move || run_on_this_thread(&scenario, seed, log))
        .expect("spawn a seed thread")
        .join()
        .expect("the seed thread catches its own panics")
}

fn run_on_this_thread(scenario: &Scenario, seed: u64, log: bool) -> RunOutcome {
    let _guard = log.then(|| {
        use std::io::IsTerminal;
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .finish();
        tracing::subscriber::set_default(subscriber)
    });
    let mut config = madsim::Config::default();
    config.net.send_latency = send_latency(scenario.latency_ms);
    config.net.packet_loss_rate = scenario.packet_loss_rate;
    let mut runtime = Runtime::with_seed_and_config(seed, config);
    runtime.add_simulator::<SimDisks>();
    runtime.add_simulator::<SimClocks>();
    runtime.set_time_limit(
        Duration::from_millis(scenario.duration_ms + 2 * scenario.liveness_ms) + SETUP_MARGIN,
    );
    let scenario = scenario.clone();
    run_catching(&mut runtime, seed, move |env_slot| async move {
        supervise(&scenario, &env_slot).await
    })
}

/// Runs `body` to its end on `runtime`, catching a panic: the outcome then carries the message
/// and the history up to the panic, taken from the environment `body` put in its slot.
fn run_catching<F, Fut>(runtime: &mut Runtime, seed: u64, body: F) -> RunOutcome
where
    F: FnOnce(Arc<Mutex<Option<Env>>>) -> Fut,
    Fut: std::future::Future<Output = (History, Duration)>,
{
    let outcome: Arc<Mutex<Option<(History, Duration)>>> = Arc::default();
    let slot = Arc::clone(&outcome);
    // The run's environment, kept here so that a run that panics still hands back its history.
    let environment: Arc<Mutex<Option<Env>>> = Arc::default();
    let env_slot = Arc::clone(&environment);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(async move {
            let run = body(env_slot).await;
            *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(run);
        });
    }));
    let error = result.err().map(|payload| {
        LAST_PANIC
            .with(|last| last.borrow_mut().take())
            .unwrap_or_else(|| {
                payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| {
                        payload
                            .downcast_ref::<&str>()
                            .map(|text| (*text).to_owned())
                    })
                    .unwrap_or_default()
            })
    });
    let finished = outcome
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    let (history, simulated) = match (finished, &error) {
        (Some(run), _) => run,
        (None, Some(message)) => {
            let env = environment
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            env.map(|env| history_up_to_a_panic(&env, message))
                .unwrap_or_default()
        }
        (None, None) => Default::default(),
    };
    RunOutcome {
        seed,
        history,
        simulated,
        error,
    }
}

/// The history of a run that panicked, up to the panic: the panic is its last operation
/// (`run-panicked`, with the message), and every operation still open is indeterminate. The
/// checkers judge it as any history, so `timeline` and `replay` can show what led there.
fn history_up_to_a_panic(env: &Env, message: &str) -> (History, Duration) {
    let mut recorder = env.take_recorder();
    let time_ns = recorder.history().ops.last().map_or(0, |op| op.time_ns);
    recorder.complete_pending(time_ns, "the run panicked");
    recorder.event(
        time_ns,
        "nemesis",
        crate::history::Body::Nemesis(Nemesis::RunPanicked {
            message: message.to_owned(),
        }),
    );
    (recorder.finish(), Duration::from_nanos(time_ns))
}

/// Everything the nemesis can reach.
struct Cluster {
    handle: Handle,
    net: Arc<NetSim>,
    env: Env,
    nodes: BTreeMap<String, NodeId>,
    rules: BTreeMap<String, ConnectionRules>,
    /// Each broker's clean-shutdown request (its SIGTERM), new at every start.
    stops: BTreeMap<String, StopSlot>,
    /// The cluster invariants' monitor (replicated scenarios).
    monitor: Option<SharedMonitor>,
    down: Mutex<BTreeSet<String>>,
    /// Brokers stopped cleanly and not killed since: a restart kills them first (the process
    /// still holds its port).
    stopped: Mutex<BTreeSet<String>>,
    clogged: Mutex<BTreeSet<(NodeId, NodeId)>>,
    /// Nodes paused and not resumed since.
    paused: Mutex<BTreeSet<String>>,
    /// The scenario's `[network]` latency, which a `delay` fault's end restores.
    base_latency: std::ops::Range<Duration>,
    /// A `delay` fault holds.
    delayed: AtomicBool,
    /// The safety phase is over: timers started by faults do nothing more.
    healed: AtomicBool,
}

impl Cluster {
    fn id(&self, name: &str) -> NodeId {
        *self
            .nodes
            .get(name)
            .expect("the loader checked every node name")
    }

    fn crash(&self, target: &str, level: CrashLevel) {
        let id = self.id(target);
        madsim::plugin::simulator::<SimDisks>().set_next_crash(id, level);
        self.handle.kill(id);
        self.monitor_down(target);
        self.unpause(target);
        self.stopped
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(target);
        self.down
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(target.to_owned());
        let level = if level == CrashLevel::PowerLoss {
            nemesis::CrashLevel::PowerLoss
        } else {
            nemesis::CrashLevel::Process
        };
        self.env.nemesis(Nemesis::Crash {
            node: target.to_owned(),
            level: Some(level),
        });
    }

    /// `target`'s process exited by itself with `reason`: take it down (its page cache
    /// survives) and record why. A node already down (killed in the same instant) stays so.
    fn halted(&self, target: &str, reason: &str) {
        let newly_down = self
            .down
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(target.to_owned());
        if !newly_down {
            return;
        }
        let id = self.id(target);
        madsim::plugin::simulator::<SimDisks>().set_next_crash(id, CrashLevel::Process);
        self.handle.kill(id);
        self.monitor_down(target);
        self.unpause(target);
        self.stopped
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(target);
        self.env.nemesis(Nemesis::Halt {
            node: target.to_owned(),
            reason: reason.to_owned(),
        });
    }

    /// The action with its selector target (`leader(P)`, `followers(P)`, `isr(P)`,
    /// `controller-leader`) resolved to a node now, as the brokers see it; the history records
    /// what it resolved to. `None` when nothing matches (no running leader, no follower up):
    /// the fault does not fire.
    fn resolve(&self, action: &FaultAction) -> Option<FaultAction> {
        let mut action = action.clone();
        let Some(target) = action.target_mut() else {
            return Some(action);
        };
        let Some(selector) = Selector::parse(target) else {
            return Some(action);
        };
        let node = self.select(&selector);
        self.env.nemesis(Nemesis::Resolve {
            target: target.clone(),
            node: node.clone(),
        });
        *target = node?;
        Some(action)
    }

    fn select(&self, selector: &Selector) -> Option<String> {
        let partition = match selector {
            Selector::ControllerLeader => {
                // A quorum of one has no election; a Raft quorum's leader is the controller that
                // last became active (none yet: the fault does not fire).
                if !self.nodes.contains_key("controller-1") {
                    return Some("controller-0".to_owned());
                }
                let active = self.env.active_controller()?;
                let down = self.down.lock().unwrap_or_else(PoisonError::into_inner);
                return (!down.contains(&active)).then_some(active);
            }
            Selector::Leader(partition)
            | Selector::Followers(partition)
            | Selector::Isr(partition) => partition,
        };
        let Some(monitor) = &self.monitor else {
            // One broker: it leads everything, and is the whole ISR.
            let only = self
                .nodes
                .contains_key("broker-0")
                .then(|| "broker-0".to_owned());
            return match selector {
                Selector::Followers(_) => None,
                _ => only,
            };
        };
        let leadership = monitor
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .leadership(partition)?;
        let down = self.down.lock().unwrap_or_else(PoisonError::into_inner);
        let candidates: Vec<String> = match selector {
            Selector::Leader(_) => return Some(leadership.leader),
            Selector::Followers(_) => leadership
                .replicas
                .into_iter()
                .filter(|node| *node != leadership.leader)
                .collect(),
            _ => leadership.isr,
        };
        let running: Vec<String> = candidates
            .into_iter()
            .filter(|node| !down.contains(node))
            .collect();
        if running.is_empty() {
            return None;
        }
        let index = madsim::rand::thread_rng().gen_range(0..running.len());
        Some(running[index].clone())
    }

    /// Tells the monitor that `target` no longer presumes to lead anything.
    fn monitor_down(&self, target: &str) {
        if let Some(monitor) = &self.monitor {
            monitor
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .down(target);
        }
    }

    /// Restarts `target` if it is down and the safety phase is not over; returns whether it did.
    fn restart_if_down(&self, target: &str) -> bool {
        let down = self
            .down
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(target);
        let restart = down && !self.healed.load(Ordering::SeqCst);
        if restart {
            self.restart(target);
        }
        restart
    }

    /// Asks a running broker to stop cleanly; it counts as down (restarted later or at the end
    /// of the safety phase). A broker already down is left alone.
    fn stop(&self, target: &str) {
        let newly_down = self
            .down
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(target.to_owned());
        if newly_down {
            self.monitor_down(target);
            self.stops[target]
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .notify_one();
            self.stopped
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(target.to_owned());
        }
        self.env.nemesis(Nemesis::Stop {
            node: target.to_owned(),
            running: newly_down,
        });
    }

    fn restart(&self, target: &str) {
        let id = self.id(target);
        let was_down = self
            .down
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(target);
        let was_stopped = self
            .stopped
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(target);
        if !was_down || was_stopped {
            madsim::plugin::simulator::<SimDisks>().set_next_crash(id, CrashLevel::Process);
            self.handle.kill(id);
            self.monitor_down(target);
            self.unpause(target);
        }
        self.handle.restart(id);
        self.env.nemesis(Nemesis::Restart {
            node: target.to_owned(),
        });
    }

    fn clog(&self, from: NodeId, to: NodeId) {
        self.net.clog_link(from, to);
        self.clogged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((from, to));
    }

    fn unclog(&self, links: &[(NodeId, NodeId)]) {
        let mut clogged = self.clogged.lock().unwrap_or_else(PoisonError::into_inner);
        for link in links {
            if clogged.remove(link) {
                self.net.unclog_link(link.0, link.1);
            }
        }
    }

    /// Applies one fault; returns links to unclog later (for `heal_after_ms`).
    fn apply(&self, action: &FaultAction) -> Vec<(NodeId, NodeId)> {
        match action {
            FaultAction::Crash { target, level, .. } => self.crash(target, *level),
            FaultAction::Restart { target } => self.restart(target),
            FaultAction::Stop { target, .. } => self.stop(target),
            FaultAction::Partition { groups, .. } => return self.partition(groups),
            FaultAction::Isolate { target, .. } => return self.isolate(target),
            FaultAction::Pause { target, .. } => self.pause(target),
            FaultAction::Delay { latency_ms, .. } => self.delay(Some(*latency_ms)),
            FaultAction::SlowDisk {
                target,
                fsync_latency_us,
                ..
            } => self.slow_disk(target, Some(*fsync_latency_us)),
            FaultAction::ClockSkew {
                target,
                offset_ms: (low, high),
                ..
            } => self.clock_skew(target, madsim::rand::thread_rng().gen_range(*low..=*high)),
            FaultAction::DiskFull {
                target,
                free_bytes: (low, high),
                ..
            } => self.disk_full(
                target,
                Some(madsim::rand::thread_rng().gen_range(*low..=*high)),
            ),
            FaultAction::Clog { from, to, .. } => {
                let link = (self.id(from), self.id(to));
                self.clog(link.0, link.1);
                self.env.nemesis(Nemesis::Clog {
                    from: from.clone(),
                    to: to.clone(),
                });
                return vec![link];
            }
            FaultAction::Connection { .. } => self.arm_connection(action),
            FaultAction::Disk { .. } | FaultAction::Corrupt { .. } => self.disk_fault(action),
            FaultAction::Heal => self.heal_network(),
        }
        Vec::new()
    }

    /// Cuts `target` off from every other node; the links cut.
    fn isolate(&self, target: &str) -> Vec<(NodeId, NodeId)> {
        let node = self.id(target);
        let links: Vec<(NodeId, NodeId)> = self
            .nodes
            .keys()
            .filter(|other| *other != target)
            .flat_map(|other| [(node, self.id(other)), (self.id(other), node)])
            .collect();
        for (from, to) in &links {
            self.clog(*from, *to);
        }
        self.env.nemesis(Nemesis::Isolate {
            node: target.to_owned(),
        });
        links
    }

    /// Arms a connection fault on a broker's connections.
    fn arm_connection(&self, action: &FaultAction) {
        let FaultAction::Connection {
            target,
            kind,
            api,
            count,
            probability,
        } = action
        else {
            unreachable!("a connection fault")
        };
        self.rules
            .get(target)
            .expect("a broker target")
            .arm(*kind, *api, *count, *probability);
        let fault = |error: Option<String>| nemesis::ConnectionFault {
            node: target.clone(),
            api: api.map(|api| format!("{api:?}")),
            count: *count,
            probability: *probability,
            error,
        };
        self.env.nemesis(match kind {
            ConnectionFaultKind::DropRequest => Nemesis::DropRequest(fault(None)),
            ConnectionFaultKind::DropResponse => Nemesis::DropResponse(fault(None)),
            ConnectionFaultKind::ResetMidResponse => Nemesis::ResetMidResponse(fault(None)),
            ConnectionFaultKind::RejectRequest(error) => {
                Nemesis::RejectRequest(fault(Some(error.name().clone())))
            }
        });
    }

    /// A fault of a broker's disk: EIO armed, or a byte flipped.
    fn disk_fault(&self, action: &FaultAction) {
        let disks = madsim::plugin::simulator::<SimDisks>();
        match action {
            FaultAction::Disk {
                target,
                fail_writes,
                fail_syncs,
                on_fsync_failure,
            } => {
                let faults = DiskFaults {
                    fail_writes: *fail_writes,
                    fail_syncs: *fail_syncs,
                };
                disks.inject(self.id(target), &faults, *on_fsync_failure);
                let policy = match on_fsync_failure {
                    FsyncFailure::DropDirtyPages => "drop",
                    FsyncFailure::KeepDirtyPages => "keep",
                };
                self.env.nemesis(Nemesis::DiskFault {
                    node: target.clone(),
                    fail_writes: *fail_writes,
                    fail_syncs: *fail_syncs,
                    on_fsync_failure: Some(policy.to_owned()),
                });
            }
            FaultAction::Corrupt { target, files } => {
                let corrupted = disks.corrupt(self.id(target), |name| files.matches(name));
                let (file, position) = corrupted.map_or((None, None), |(file, position)| {
                    (Some(file), Some(position))
                });
                self.env.nemesis(Nemesis::Corrupt {
                    node: target.clone(),
                    file,
                    position,
                });
            }
            other => unreachable!("not a disk fault: {other:?}"),
        }
    }

    /// Clogs every link between nodes of different groups, both ways.
    fn partition(&self, groups: &[Vec<String>]) -> Vec<(NodeId, NodeId)> {
        let mut links = Vec::new();
        for (index, group) in groups.iter().enumerate() {
            for other in &groups[index + 1..] {
                for (a, b) in group.iter().flat_map(|a| other.iter().map(move |b| (a, b))) {
                    links.push((self.id(a), self.id(b)));
                    links.push((self.id(b), self.id(a)));
                }
            }
        }
        for (from, to) in &links {
            self.clog(*from, *to);
        }
        self.env.nemesis(Nemesis::Partition {
            groups: groups.to_vec(),
        });
        links
    }

    fn heal_network(&self) {
        let links: Vec<(NodeId, NodeId)> = self
            .clogged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .copied()
            .collect();
        self.unclog(&links);
        self.delay(None);
        for rules in self.rules.values() {
            rules.clear();
        }
        self.env.nemesis(Nemesis::Heal { links: links.len() });
    }

    /// Freezes `target`'s tasks (a pause on a paused node does nothing more).
    fn pause(&self, target: &str) {
        self.handle.pause(self.id(target));
        self.paused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(target.to_owned());
        self.env.nemesis(Nemesis::Pause {
            node: target.to_owned(),
        });
    }

    /// Sets every message's latency to `latency_ms` (a delay spike), or back to the scenario's
    /// (`None`; nothing happens when no spike holds).
    fn delay(&self, latency_ms: Option<(u64, u64)>) {
        match latency_ms {
            Some((low, high)) => {
                self.delayed.store(true, Ordering::SeqCst);
                self.net
                    .update_config(|config| config.send_latency = send_latency((low, high)));
                self.env.nemesis(Nemesis::Delay {
                    latency_ms: [low, high],
                });
            }
            None => {
                if self.delayed.swap(false, Ordering::SeqCst) {
                    let base = self.base_latency.clone();
                    self.net.update_config(|config| config.send_latency = base);
                    self.env.nemesis(Nemesis::DelayEnd {});
                }
            }
        }
    }

    /// Makes `target`'s fsyncs slow (`Some` latency range in µs) or normal again (`None`).
    fn slow_disk(&self, target: &str, latency: Option<(u64, u64)>) {
        madsim::plugin::simulator::<SimDisks>().set_slow(self.id(target), latency);
        match latency {
            Some((low, high)) => self.env.nemesis(Nemesis::SlowDisk {
                node: target.to_owned(),
                fsync_latency_us: [low, high],
            }),
            None => self.env.nemesis(Nemesis::SlowDiskEnd {
                node: target.to_owned(),
            }),
        }
    }

    /// Fills `target`'s disk, leaving `free` more bytes for its files (`Some`), or frees it
    /// (`None`).
    fn disk_full(&self, target: &str, free: Option<u64>) {
        let storage = madsim::plugin::simulator::<SimDisks>().storage(self.id(target));
        if let Some(free) = free {
            let used = storage.used_bytes();
            storage.set_capacity(Some(used + free));
            self.env.nemesis(Nemesis::DiskFull {
                node: target.to_owned(),
                used_bytes: used,
                free_bytes: free,
            });
        } else {
            storage.set_capacity(None);
            self.env.nemesis(Nemesis::DiskFullEnd {
                node: target.to_owned(),
            });
        }
    }

    /// Skews `target`'s wall clock by `skew_ms` (0: back to the true time).
    fn clock_skew(&self, target: &str, skew_ms: i64) {
        madsim::plugin::simulator::<SimClocks>().set(self.id(target), skew_ms);
        if skew_ms == 0 {
            self.env.nemesis(Nemesis::ClockSkewEnd {
                node: target.to_owned(),
            });
        } else {
            self.env.nemesis(Nemesis::ClockSkew {
                node: target.to_owned(),
                skew_ms,
            });
        }
    }

    /// Ends a fault that holds until its `heal_after_ms` and has no links to unclog: a pause,
    /// a slow disk, a full disk, a clock skew, a delay spike.
    fn end(&self, action: &FaultAction) {
        match action {
            FaultAction::Pause { target, .. } => self.resume(target),
            FaultAction::SlowDisk { target, .. } => self.slow_disk(target, None),
            FaultAction::DiskFull { target, .. } => self.disk_full(target, None),
            FaultAction::ClockSkew { target, .. } => self.clock_skew(target, 0),
            FaultAction::Delay { .. } => self.delay(None),
            other => unreachable!("{other:?} ends by unclogging its links"),
        }
    }

    /// Forgets a pause of `target`, which a kill ends: its process is gone, and the one a restart
    /// starts runs (madsim starts a restarted node unpaused). The history records no `resume`
    /// for it then.
    fn unpause(&self, target: &str) {
        self.paused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(target);
    }

    /// Lets a paused `target` run again; a node no longer paused is left alone.
    fn resume(&self, target: &str) {
        let was_paused = self
            .paused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(target);
        if was_paused {
            self.handle.resume(self.id(target));
            self.env.nemesis(Nemesis::Resume {
                node: target.to_owned(),
            });
        }
    }

    /// End of the safety phase: heal the network, disarm faults, resume paused nodes, restart
    /// every node still down.
    fn heal_all(&self) {
        self.healed.store(true, Ordering::SeqCst);
        self.heal_network();
        let paused: Vec<String> = self
            .paused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect();
        for node in paused {
            self.resume(&node);
        }
        let slow: Vec<String> = self
            .nodes
            .keys()
            .filter(|name| {
                madsim::plugin::simulator::<SimDisks>()
                    .slow(self.id(name))
                    .is_some()
            })
            .cloned()
            .collect();
        for node in slow {
            self.slow_disk(&node, None);
        }
        let full: Vec<String> = self
            .nodes
            .keys()
            .filter(|name| {
                madsim::plugin::simulator::<SimDisks>()
                    .try_storage(self.id(name))
                    .is_some_and(|storage| storage.capacity().is_some())
            })
            .cloned()
            .collect();
        for node in full {
            self.disk_full(&node, None);
        }
        let down: Vec<String> = self
            .down
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect();
        for node in down {
            self.restart(&node); // a down node is restarted without a kill, and leaves `down`
        }
    }
}

/// For each topic with `retention.ms`, how long after its last write every record must be gone:
/// `retention.ms`, plus the broker's `log.retention.check.interval.ms`, plus its `flush.ms` (a
/// segment goes only once durable), plus a second of slack. None while producers still write.
fn retention_waits(scenario: &Scenario, producers_unfinished: bool) -> BTreeMap<String, u64> {
    if producers_unfinished {
        return BTreeMap::new();
    }
    let broker = broker_config(scenario, 0);
    let check = broker.log_retention_check_interval_ms.max(0) as u64;
    scenario
        .topics
        .iter()
        .filter_map(|topic| {
            let retention: u64 = topic.configs.get("retention.ms")?.parse().ok()?;
            let flush: u64 = topic
                .configs
                .get("flush.ms")
                .and_then(|ms| ms.parse().ok())
                .unwrap_or(0);
            Some((topic.name.clone(), retention + check + flush + 1_000))
        })
        .collect()
}

fn controller_config(scenario: &Scenario, index: u32) -> BrokerConfig {
    let mut config = BrokerConfig::default();
    let base = [
        (
            "node.id".to_owned(),
            (CONTROLLER_ID_BASE + index).to_string(),
        ),
        ("process.roles".to_owned(), "controller".to_owned()),
        (
            "listeners".to_owned(),
            format!("PLAINTEXT://{}:{CONTROLLER_PORT}", controller_ip(index)),
        ),
        ("log.dirs".to_owned(), "/data".to_owned()),
        (
            "controller.quorum.voters".to_owned(),
            quorum_voters(scenario).expect("a scenario with controllers"),
        ),
    ];
    let pairs = base.iter().chain(&scenario.broker_overrides);
    config
        .apply(pairs.map(|(key, value)| (key.as_str(), value.as_str())))
        .expect("the loader validated the config");
    config
}

fn broker_config(scenario: &Scenario, index: u32) -> BrokerConfig {
    let mut config = BrokerConfig::default();
    let listener = format!("PLAINTEXT://{}:{BROKER_PORT}", broker_ip(index));
    let mut base = vec![
        ("node.id".to_owned(), index.to_string()),
        ("listeners".to_owned(), listener),
        ("log.dirs".to_owned(), "/data".to_owned()),
    ];
    if let Some(voters) = quorum_voters(scenario) {
        base.push(("controller.quorum.voters".to_owned(), voters));
    }
    let pairs = base.iter().chain(&scenario.broker_overrides);
    config
        .apply(pairs.map(|(key, value)| (key.as_str(), value.as_str())))
        .expect("the loader validated the broker config");
    config
}

/// The cluster invariants' monitor: they mean something with more than one replica.
fn cluster_monitor(scenario: &Scenario) -> Option<SharedMonitor> {
    (scenario.brokers > 1).then(|| {
        let ids = (0..scenario.brokers)
            .map(|index| {
                (
                    format!("broker-{index}"),
                    BrokerId(broker_config(scenario, index).node_id),
                )
            })
            .collect();
        Arc::new(Mutex::new(ClusterMonitor::new(ids)))
    })
}

/// A node's simulated disk, each fsync taking a latency drawn from a `slow_disk` fault's range
/// while it holds, else from the scenario's.
fn node_storage(
    node: NodeId,
    (fsync_low, fsync_high): (u64, u64),
) -> seedlog::storage::memory::MemoryStorage {
    let storage = madsim::plugin::simulator::<SimDisks>().storage(node);
    storage.set_sync_latency(move || {
        let (low, high) = madsim::plugin::simulator::<SimDisks>()
            .slow(node)
            .unwrap_or((fsync_low, fsync_high));
        let micros = madsim::rand::thread_rng().gen_range(low..=high);
        Duration::from_micros(micros)
    });
    storage
}

/// Starts one node per broker; returns their node ids and connection-fault rules by name.
fn start_brokers(handle: &Handle, env: &Env, scenario: &Scenario) -> Brokers {
    let monitor = cluster_monitor(scenario);
    let (exits, exited) = mpsc::unbounded_channel();
    let mut nodes = BTreeMap::new();
    let mut rules = BTreeMap::new();
    let mut stops = BTreeMap::new();
    let brokers = (0..scenario.brokers).map(|index| {
        let name = format!("broker-{index}");
        (name, broker_ip(index), broker_config(scenario, index))
    });
    let controllers = (0..scenario.controllers).map(|index| {
        let name = format!("controller-{index}");
        (
            name,
            controller_ip(index),
            controller_config(scenario, index),
        )
    });
    for (name, ip, config) in controllers.chain(brokers) {
        let (fsync_low, fsync_high) = scenario.fsync_latency_us;
        let broker_rules = ConnectionRules::default();
        rules.insert(name.clone(), broker_rules.clone());
        let stop: StopSlot = Arc::default();
        stops.insert(name.clone(), Arc::clone(&stop));
        let observer: Arc<dyn BrokerObserver> =
            Arc::new(HistoryObserver::new(env, &name, monitor.clone()));
        let (node_exits, node_name) = (exits.clone(), name.clone());
        let node = handle
            .create_node()
            .name(name.clone())
            .ip(ip)
            .init(move || {
                let config = config.clone();
                let faults = broker_rules.clone();
                let observer = Arc::clone(&observer);
                let exits = node_exits.clone();
                let name = node_name.clone();
                // A fresh request per start: one sent to an earlier run never stops this one.
                let shutdown = Arc::new(Notify::new());
                *stop.lock().unwrap_or_else(PoisonError::into_inner) = Arc::clone(&shutdown);
                async move {
                    let node = madsim::plugin::node();
                    let storage = node_storage(node, (fsync_low, fsync_high));
                    let options = ServerOptions {
                        seed: madsim::rand::random(),
                        faults: Some(Arc::new(faults)),
                        observer: Some(observer),
                        shutdown: Some(shutdown),
                        // a `clock_skew` fault reaches a broker when it starts
                        wall_clock_offset_ms: madsim::plugin::simulator::<SimClocks>().skew(node),
                    };
                    // (No combined nodes: the scenario loader refuses `process.roles`.)
                    let result = if config.process_role == ProcessRole::Controller {
                        run_controller(config, storage, options).await
                    } else {
                        Box::pin(run_broker(config, storage, options)).await
                    };
                    if let Err(error) = result {
                        // The process exits (a halt on a storage failure, a start-up that
                        // failed): the harness takes the node down, as a supervisor sees it.
                        tracing::error!(%error, "node stopped");
                        let _ = exits.send((name, error.to_string()));
                    }
                }
            })
            .build();
        nodes.insert(name, node.id());
    }
    Brokers {
        nodes,
        rules,
        stops,
        monitor,
        exited,
    }
}

/// The broker nodes, their connection-fault rules and their stop requests.
struct Brokers {
    nodes: BTreeMap<String, NodeId>,
    rules: BTreeMap<String, ConnectionRules>,
    stops: BTreeMap<String, StopSlot>,
    monitor: Option<SharedMonitor>,
    /// Nodes whose process exited on its own (a halt), with the error.
    exited: mpsc::UnboundedReceiver<(String, String)>,
}

/// Where a broker's current clean-shutdown request lives.
type StopSlot = Arc<Mutex<Arc<Notify>>>;

/// Starts the producer and consumer nodes; returns each producer's progress.
fn start_clients(
    handle: &Handle,
    env: &Env,
    scenario: &Scenario,
    nodes: &mut BTreeMap<String, NodeId>,
    stop_consumers: &Arc<AtomicBool>,
) -> Vec<SharedProgress> {
    let mut progress = Vec::new();
    for (index, spec) in scenario.producers.iter().enumerate() {
        let shared = SharedProgress::default();
        progress.push(Arc::clone(&shared));
        let (env, spec) = (env.clone(), spec.clone());
        let node = handle
            .create_node()
            .name(spec.id.clone())
            .ip(IpAddr::from([10, 0, 1, (index + 1) as u8]))
            .init(move || producer_incarnation(env.clone(), spec.clone(), Arc::clone(&shared)))
            .build();
        nodes.insert(scenario.producers[index].id.clone(), node.id());
    }
    for (index, spec) in scenario.consumers.iter().enumerate() {
        let (env, spec, stop) = (env.clone(), spec.clone(), Arc::clone(stop_consumers));
        // Drawn only when the scenario asks, so scenarios without it draw what they drew before.
        let start_after = Duration::from_millis(spec.start_after_ms.map_or(0, draw));
        let first = Arc::new(AtomicBool::new(true));
        let node = handle
            .create_node()
            .name(spec.id.clone())
            .ip(IpAddr::from([10, 0, 1, (100 + index) as u8]))
            .init(move || {
                let (env, spec, stop) = (env.clone(), spec.clone(), Arc::clone(&stop));
                let delay = first.swap(false, Ordering::SeqCst) && !start_after.is_zero();
                async move {
                    if delay {
                        tokio::time::sleep(start_after).await;
                    }
                    consumer_incarnation(env, spec, stop).await;
                }
            })
            .build();
        nodes.insert(scenario.consumers[index].id.clone(), node.id());
    }
    progress
}

async fn setup(handle: &Handle, env: &Env, scenario: &Scenario) {
    let node = handle
        .create_node()
        .name("setup")
        .ip(IpAddr::from([10, 0, 2, 1]))
        .build();
    let (env, topics) = (env.clone(), scenario.topics.clone());
    let created = node
        .spawn(async move { setup_topics(&env, &topics).await })
        .await
        .expect("setup task");
    if let Err(error) = created {
        panic!("setup failed: {error}");
    }
}

/// After healing: let producers finish (up to three quarters of the liveness budget), then read
/// everything. If producers are still busy when the final read starts, the history says so
/// (`producers-unfinished`): writes acknowledged after the final read's snapshot can only show
/// up as `unseen`, a liveness shortfall rather than a loss.
async fn liveness_phase(
    handle: &Handle,
    env: &Env,
    scenario: &Scenario,
    progress: &[SharedProgress],
) {
    let liveness = Duration::from_millis(scenario.liveness_ms);
    let healed = tokio::time::Instant::now();
    while !progress.iter().all(finished) && tokio::time::Instant::now() < healed + liveness * 3 / 4
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let unfinished: Vec<String> = scenario
        .producers
        .iter()
        .zip(progress)
        .filter(|(_, progress)| !finished(progress))
        .map(|(spec, _)| spec.id.clone())
        .collect();
    if !unfinished.is_empty() {
        env.nemesis(Nemesis::ProducersUnfinished {
            producers: unfinished.clone(),
        });
    }
    let partitions: Vec<TopicPartition> = scenario
        .topics
        .iter()
        .flat_map(|topic| {
            (0..topic.partitions)
                .map(|partition| TopicPartition::new(topic.name.as_str(), partition))
        })
        .collect();
    let reader = handle
        .create_node()
        .name(FINAL_READER)
        .ip(IpAddr::from([10, 0, 2, 2]))
        .build();
    let retention = retention_waits(scenario, !unfinished.is_empty());
    reader
        .spawn(final_read(
            env.clone(),
            partitions,
            retention,
            healed + liveness,
        ))
        .await
        .expect("final read task");
    // Consumer groups process what was acknowledged, and assigned consumers read to the end of
    // the final log, before the run ends (or the liveness phase runs out and
    // `group-at-least-once` or `stalled` tells).
    while !env.record(|recorder, _| crate::history::groups_caught_up(recorder.ops()))
        && tokio::time::Instant::now() < healed + liveness
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut lag = crate::checker::ConsumerLag::default();
    while !env.record(|recorder, _| lag.caught_up(recorder.ops()))
        && tokio::time::Instant::now() < healed + liveness
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn supervise(scenario: &Scenario, env_slot: &Mutex<Option<Env>>) -> (History, Duration) {
    let handle = Handle::current();
    let servers = (0..scenario.brokers)
        .map(|index| format!("{}:{BROKER_PORT}", broker_ip(index)))
        .collect();
    // Each send is an invocation and a completion; polls and events come on top.
    let sends: u64 = scenario.producers.iter().map(|spec| spec.messages).sum();
    let expected_ops = usize::try_from(sends.saturating_mul(5) / 2).unwrap_or(usize::MAX);
    let env = Env::new(servers, expected_ops.min(1 << 18));
    *env_slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(env.clone());
    let Brokers {
        mut nodes,
        rules,
        stops,
        monitor,
        exited,
    } = start_brokers(&handle, &env, scenario);
    setup(&handle, &env, scenario).await;
    let workload_start = tokio::time::Instant::now();
    let stop_consumers = Arc::new(AtomicBool::new(false));
    let progress = start_clients(&handle, &env, scenario, &mut nodes, &stop_consumers);
    let cluster = Arc::new(Cluster {
        handle: handle.clone(),
        net: NetSim::current(),
        env: env.clone(),
        nodes,
        rules,
        stops,
        monitor,
        down: Mutex::default(),
        stopped: Mutex::default(),
        clogged: Mutex::default(),
        paused: Mutex::default(),
        base_latency: send_latency(scenario.latency_ms),
        delayed: AtomicBool::new(false),
        healed: AtomicBool::new(false),
    });
    let nemesis = tokio::spawn(run_nemesis(
        Arc::clone(&cluster),
        scenario.faults.clone(),
        workload_start,
    ));
    tokio::spawn(take_down_exited(Arc::clone(&cluster), exited));
    tokio::time::sleep_until(workload_start + Duration::from_millis(scenario.duration_ms)).await;
    nemesis.abort();
    cluster.heal_all();
    liveness_phase(&handle, &env, scenario, &progress).await;
    stop_consumers.store(true, Ordering::SeqCst);
    let mut recorder = env.take_recorder();
    recorder.complete_pending(env.now_ns(), "no completion before the run ended");
    let outcome = (recorder.finish(), env.start().elapsed());
    // madsim never drops a task that is still waiting when the runtime ends (the task and the
    // channel or socket it waits on keep each other alive), so every seed leaked its brokers'
    // disks and connections: 2-5 MB a seed, enough for a long sweep to run out of memory.
    // Killing the nodes and letting the executor run once more drops them.
    for id in cluster.nodes.values() {
        handle.kill(*id);
    }
    tokio::time::sleep(Duration::from_millis(1)).await;
    outcome
}

/// A node whose process exited on its own (Kafka's broker halts when its only log directory
/// fails) is down, as a crashed one: killed (its page cache survives, as when a process exits),
/// recorded as a `halt` with its reason, and restarted by the liveness phase (or by a fault that
/// restarts it; at once if the phase has begun), as an operator or a supervisor would.
async fn take_down_exited(
    cluster: Arc<Cluster>,
    mut exited: mpsc::UnboundedReceiver<(String, String)>,
) {
    while let Some((node, reason)) = exited.recv().await {
        cluster.halted(&node, &reason);
        if cluster.healed.load(Ordering::SeqCst) {
            // Past the heal (a disk fault armed during the safety phase can strike later): the
            // supervisor restarts it at once, as the heal restarted every node down then.
            cluster.restart(&node);
        }
    }
}

/// A fault with its times drawn from the seed.
struct Scheduled {
    at_ms: u64,
    action: FaultAction,
    restart_after_ms: Option<u64>,
    heal_after_ms: Option<u64>,
    recrash: Option<(u64, CrashLevel)>,
}

fn draw(spec: TimeSpec) -> u64 {
    match spec {
        TimeSpec::Fixed(ms) => ms,
        TimeSpec::Range(low, high) => madsim::rand::thread_rng().gen_range(low..=high),
    }
}

/// Draws every fault's times, in file order, so the schedule depends on the seed alone.
fn schedule(faults: Vec<crate::scenario::Fault>) -> Vec<Scheduled> {
    let mut scheduled: Vec<Scheduled> = faults
        .into_iter()
        .map(|fault| {
            let at_ms = draw(fault.at_ms);
            let (restart_after_ms, heal_after_ms, recrash) = match &fault.action {
                FaultAction::Crash {
                    restart_after_ms,
                    recrash,
                    ..
                } => (
                    restart_after_ms.map(draw),
                    None,
                    recrash.map(|recrash| (draw(recrash.after_ms), recrash.level)),
                ),
                FaultAction::Stop {
                    restart_after_ms, ..
                } => (restart_after_ms.map(draw), None, None),
                FaultAction::Partition { heal_after_ms, .. }
                | FaultAction::Isolate { heal_after_ms, .. }
                | FaultAction::Pause { heal_after_ms, .. }
                | FaultAction::SlowDisk { heal_after_ms, .. }
                | FaultAction::DiskFull { heal_after_ms, .. }
                | FaultAction::ClockSkew { heal_after_ms, .. }
                | FaultAction::Delay { heal_after_ms, .. }
                | FaultAction::Clog { heal_after_ms, .. } => (None, heal_after_ms.map(draw), None),
                _ => (None, None, None),
            };
            Scheduled {
                at_ms,
                action: fault.action,
                restart_after_ms,
                heal_after_ms,
                recrash,
            }
        })
        .collect();
    scheduled.sort_by_key(|fault| fault.at_ms);
    scheduled
}

/// Plays the fault timeline; restarts, recrashes and heals run as their own tasks and stop once
/// the safety phase is over (`Cluster::heal_all`).
async fn run_nemesis(
    cluster: Arc<Cluster>,
    faults: Vec<crate::scenario::Fault>,
    start: tokio::time::Instant,
) {
    let schedule = schedule(faults);
    let drawn: Vec<u64> = schedule.iter().map(|fault| fault.at_ms).collect();
    cluster.env.nemesis(Nemesis::Schedule { at_ms: drawn });
    let mut timers = Vec::new();
    for fault in schedule {
        tokio::time::sleep_until(start + Duration::from_millis(fault.at_ms)).await;
        let Some(action) = cluster.resolve(&fault.action) else {
            continue;
        };
        let links = cluster.apply(&action);
        let cluster = Arc::clone(&cluster);
        match (&action, fault.restart_after_ms, fault.heal_after_ms) {
            (
                FaultAction::Crash { target, .. } | FaultAction::Stop { target, .. },
                Some(after),
                _,
            ) => {
                let target = target.clone();
                timers.push(tokio::spawn(restart_later(
                    cluster,
                    target,
                    after,
                    fault.recrash,
                )));
            }
            (
                FaultAction::Pause { .. }
                | FaultAction::SlowDisk { .. }
                | FaultAction::DiskFull { .. }
                | FaultAction::ClockSkew { .. }
                | FaultAction::Delay { .. },
                _,
                Some(after),
            ) => {
                let action = action.clone();
                timers.push(tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(after)).await;
                    if !cluster.healed.load(Ordering::SeqCst) {
                        cluster.end(&action);
                    }
                }));
            }
            (_, _, Some(after)) => timers.push(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(after)).await;
                cluster.unclog(&links);
                cluster.env.nemesis(Nemesis::Heal { links: links.len() });
            })),
            _ => {}
        }
    }
    for timer in timers {
        let _ = timer.await;
    }
}

/// Restarts a crashed node after `after_ms`; with a recrash, kills it again while it recovers
/// and restarts it once more.
async fn restart_later(
    cluster: Arc<Cluster>,
    target: String,
    after_ms: u64,
    recrash: Option<(u64, CrashLevel)>,
) {
    tokio::time::sleep(Duration::from_millis(after_ms)).await;
    if !cluster.restart_if_down(&target) {
        return;
    }
    let Some((recrash_after_ms, level)) = recrash else {
        return;
    };
    tokio::time::sleep(Duration::from_millis(recrash_after_ms)).await;
    if cluster.healed.load(Ordering::SeqCst) {
        return;
    }
    cluster.crash(&target, level);
    tokio::time::sleep(Duration::from_millis(after_ms)).await;
    cluster.restart_if_down(&target);
}

/// The network latency range for `[low, high]` ms (madsim wants a non-empty range).
fn send_latency((low, high): (u64, u64)) -> std::ops::Range<Duration> {
    Duration::from_millis(low)..Duration::from_millis(high.max(low + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run that panics (an invariant violated, as finding 1's controller did) keeps its
    /// history up to the panic, with the panic as its last operation and every operation still
    /// open completed as indeterminate: `timeline` and `replay` show what led there.
    #[test]
    fn a_run_that_panics_keeps_its_history_up_to_the_panic() {
        let outcome = std::thread::spawn(|| {
            let mut runtime = Runtime::with_seed_and_config(7, madsim::Config::default());
            run_catching(&mut runtime, 7, |env_slot| async move {
                let env = Env::new(vec!["10.0.0.1:9092".to_owned()], 16);
                *env_slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(env.clone());
                env.nemesis(Nemesis::Crash {
                    node: "broker-0".to_owned(),
                    level: None,
                });
                tokio::time::sleep(Duration::from_millis(5)).await;
                env.record(|recorder, now| {
                    let process = recorder.new_process();
                    recorder.invoke(
                        now,
                        process,
                        &"c1".into(),
                        crate::history::Body::poll_invocation(),
                    );
                });
                panic!("an invariant does not hold");
            })
        })
        .join()
        .expect("the run's panic is caught");
        let error = outcome.error.expect("the panic is reported");
        assert!(error.contains("an invariant does not hold"), "{error}");
        let ops = &outcome.history.ops;
        assert_eq!(ops.len(), 4, "{ops:?}");
        let last = ops.last().expect("ops");
        assert_eq!(
            last.body.f(),
            "run-panicked",
            "the panic is the last operation: {last:?}"
        );
        assert_eq!(
            outcome.simulated,
            Duration::from_nanos(last.time_ns),
            "the run lasted until the panic"
        );
    }
}
