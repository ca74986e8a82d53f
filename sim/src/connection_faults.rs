//! Connection faults on a broker (what madsim's TCP cannot do: it never drops bytes): drop a
//! request, drop a response after the broker applied the request (a dropped ack), or cut a
//! response mid-frame. Rules are armed by the nemesis and consumed by the broker's connection
//! layer through the [`ConnectionFaults`] hook; each rule fires `count` times, each time with
//! its `probability` drawn from the simulation's RNG.

use std::sync::{Arc, Mutex, PoisonError};

use kafka_protocol::messages::ApiKey;
use madsim::rand::Rng;
use seedlog::runtime::net::{ConnectionFaults, FaultAction};

use crate::scenario::ConnectionFaultKind;

#[derive(Debug, Clone)]
struct Rule {
    kind: ConnectionFaultKind,
    api: Option<ApiKey>,
    remaining: u32,
    probability: f64,
}

/// The armed rules of one broker; shared by the nemesis and the broker's connections.
#[derive(Debug, Clone, Default)]
pub struct ConnectionRules {
    rules: Arc<Mutex<Vec<Rule>>>,
}

impl ConnectionRules {
    /// Arms a rule.
    pub fn arm(
        &self,
        kind: ConnectionFaultKind,
        api: Option<ApiKey>,
        count: u32,
        probability: f64,
    ) {
        self.lock().push(Rule {
            kind,
            api,
            remaining: count,
            probability,
        });
    }

    /// Disarms everything.
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Rule>> {
        self.rules.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn fire(
        &self,
        api: ApiKey,
        wanted: impl Fn(ConnectionFaultKind) -> bool,
    ) -> Option<ConnectionFaultKind> {
        let mut rules = self.lock();
        let rule = rules.iter_mut().find(|rule| {
            rule.remaining > 0 && wanted(rule.kind) && rule.api.is_none_or(|wanted| wanted == api)
        })?;
        if rule.probability < 1.0 && !madsim::rand::thread_rng().gen_bool(rule.probability) {
            return None;
        }
        rule.remaining -= 1;
        Some(rule.kind)
    }
}

impl ConnectionFaults for ConnectionRules {
    fn on_request(&self, api: ApiKey) -> FaultAction {
        let wanted = |kind| {
            matches!(
                kind,
                ConnectionFaultKind::DropRequest | ConnectionFaultKind::RejectRequest(_)
            )
        };
        match self.fire(api, wanted) {
            Some(ConnectionFaultKind::RejectRequest(error)) => FaultAction::Reject(error),
            Some(_) => FaultAction::Drop,
            None => FaultAction::Pass,
        }
    }

    fn on_response(&self, api: ApiKey) -> FaultAction {
        let wanted = |kind| {
            matches!(
                kind,
                ConnectionFaultKind::DropResponse | ConnectionFaultKind::ResetMidResponse
            )
        };
        match self.fire(api, wanted) {
            Some(ConnectionFaultKind::ResetMidResponse) => FaultAction::Truncate,
            Some(_) => FaultAction::Drop,
            None => FaultAction::Pass,
        }
    }
}
