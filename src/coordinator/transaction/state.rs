//! The states of a transaction at its coordinator, and which may follow which: Kafka's
//! `TransactionState`, with the same ids (as `__transaction_state` records them) and names (as
//! DescribeTransactions and ListTransactions report them).
//!
//! | state | id | entered from | an idle id may expire |
//! |---|---|---|---|
//! | Empty | 0 | Empty, CompleteCommit, CompleteAbort | yes |
//! | Ongoing | 1 | Ongoing, Empty, CompleteCommit, CompleteAbort | no |
//! | PrepareCommit | 2 | Ongoing | no |
//! | PrepareAbort | 3 | Ongoing, PrepareEpochFence, Empty, CompleteCommit, CompleteAbort | no |
//! | CompleteCommit | 4 | PrepareCommit | yes |
//! | CompleteAbort | 5 | PrepareAbort | yes |
//! | Dead | 6 | Empty, CompleteCommit, CompleteAbort | no |
//! | PrepareEpochFence | 7 | Ongoing | no |
//!
//! PrepareAbort from Empty, CompleteCommit or CompleteAbort is transaction version 2's (KIP-890):
//! a client unsure of the coordinator's state may end with an abort; the metadata's transitions
//! allow it only then.

use std::fmt;

/// Where a transaction stands at its coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TransactionState {
    /// No transaction under way (after InitProducerId, or once one completed and was cleaned).
    Empty,
    /// A transaction has partitions (AddPartitionsToTxn, AddOffsetsToTxn): it is open.
    Ongoing,
    /// EndTxn(commit) is durable; the COMMIT markers are being written.
    PrepareCommit,
    /// EndTxn(abort), a timeout or a fence is durable; the ABORT markers are being written.
    PrepareAbort,
    /// Every COMMIT marker is written.
    CompleteCommit,
    /// Every ABORT marker is written.
    CompleteAbort,
    /// The `transactional.id` expired and is being removed.
    Dead,
    /// A newer producer is fencing this one: its epoch is bumped and the open transaction is
    /// aborted (it goes on to PrepareAbort without ever being completed itself).
    PrepareEpochFence,
}

use TransactionState::{
    CompleteAbort, CompleteCommit, Dead, Empty, Ongoing, PrepareAbort, PrepareCommit,
    PrepareEpochFence,
};

/// Every state, in id order.
pub const ALL_STATES: [TransactionState; 8] = [
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    Dead,
    PrepareEpochFence,
];

impl TransactionState {
    /// The id `__transaction_state` records.
    pub fn id(self) -> i8 {
        match self {
            Empty => 0,
            Ongoing => 1,
            PrepareCommit => 2,
            PrepareAbort => 3,
            CompleteCommit => 4,
            CompleteAbort => 5,
            Dead => 6,
            PrepareEpochFence => 7,
        }
    }

    /// The state a recorded id names, if any.
    pub fn from_id(id: i8) -> Option<TransactionState> {
        ALL_STATES.into_iter().find(|state| state.id() == id)
    }

    /// Kafka's name (DescribeTransactions, ListTransactions' state filter).
    pub fn name(self) -> &'static str {
        match self {
            Empty => "Empty",
            Ongoing => "Ongoing",
            PrepareCommit => "PrepareCommit",
            PrepareAbort => "PrepareAbort",
            CompleteCommit => "CompleteCommit",
            CompleteAbort => "CompleteAbort",
            Dead => "Dead",
            PrepareEpochFence => "PrepareEpochFence",
        }
    }

    /// The state named `name`, if any.
    pub fn from_name(name: &str) -> Option<TransactionState> {
        ALL_STATES.into_iter().find(|state| state.name() == name)
    }

    /// The states this one may be entered from (the table above).
    #[allow(clippy::match_same_arms)] // one row per state, as the table has them
    pub fn valid_previous_states(self) -> &'static [TransactionState] {
        match self {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            PrepareAbort => &[
                Ongoing,
                PrepareEpochFence,
                Empty,
                CompleteCommit,
                CompleteAbort,
            ],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteAbort, CompleteCommit],
            PrepareEpochFence => &[Ongoing],
        }
    }

    /// Whether this state may be entered from `previous`.
    pub fn may_follow(self, previous: TransactionState) -> bool {
        self.valid_previous_states().contains(&previous)
    }

    /// Whether a `transactional.id` idle in this state may expire
    /// (`transactional.id.expiration.ms`): only with no transaction open.
    pub fn expiration_allowed(self) -> bool {
        matches!(self, Empty | CompleteCommit | CompleteAbort)
    }

    /// Whether a transaction is open or being completed (no new producer id may be handed
    /// out for it then).
    pub fn has_pending_transaction(self) -> bool {
        matches!(self, Ongoing | PrepareCommit | PrepareAbort)
    }
}

impl fmt::Display for TransactionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names_round_trip_in_kafkas_numbering() {
        for (index, state) in ALL_STATES.into_iter().enumerate() {
            assert_eq!(state.id() as usize, index, "{state}");
            assert_eq!(TransactionState::from_id(state.id()), Some(state));
            assert_eq!(TransactionState::from_name(state.name()), Some(state));
        }
        assert_eq!(TransactionState::from_id(8), None);
        assert_eq!(TransactionState::from_name("ongoing"), None);
    }

    /// The whole table, written out as Kafka's `TransactionState` has it: every pair of states,
    /// each either allowed or not.
    #[test]
    fn the_transition_table_is_kafkas() {
        let allowed: &[(TransactionState, TransactionState)] = &[
            (Empty, Empty),
            (CompleteCommit, Empty),
            (CompleteAbort, Empty),
            (Ongoing, Ongoing),
            (Empty, Ongoing),
            (CompleteCommit, Ongoing),
            (CompleteAbort, Ongoing),
            (Ongoing, PrepareCommit),
            (Ongoing, PrepareAbort),
            (PrepareEpochFence, PrepareAbort),
            (Empty, PrepareAbort),
            (CompleteCommit, PrepareAbort),
            (CompleteAbort, PrepareAbort),
            (PrepareCommit, CompleteCommit),
            (PrepareAbort, CompleteAbort),
            (Empty, Dead),
            (CompleteAbort, Dead),
            (CompleteCommit, Dead),
            (Ongoing, PrepareEpochFence),
        ];
        for from in ALL_STATES {
            for to in ALL_STATES {
                assert_eq!(
                    to.may_follow(from),
                    allowed.contains(&(from, to)),
                    "{from} -> {to}"
                );
            }
        }
    }

    #[test]
    fn nothing_leaves_dead_and_nothing_but_an_abort_leaves_a_fence() {
        for to in ALL_STATES {
            assert!(!to.may_follow(Dead), "Dead -> {to}");
            assert_eq!(to.may_follow(PrepareEpochFence), to == PrepareAbort, "{to}");
        }
    }

    #[test]
    fn only_a_settled_id_may_expire() {
        let expirable: Vec<_> = ALL_STATES
            .into_iter()
            .filter(|state| state.expiration_allowed())
            .collect();
        assert_eq!(expirable, [Empty, CompleteCommit, CompleteAbort]);
    }
}
