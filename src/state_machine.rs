//! The one shape every sans-IO state machine has: the broker, the producer core and the consumer
//! core. A machine never blocks, never reads a clock and never does IO: the caller passes `now`
//! with each input, the machine appends what should happen to `out`, and the caller sleeps until
//! [`next_deadline`](StateMachine::next_deadline) when nothing else arrives (feeding a tick).
//! After every input the caller may check [`check_invariants`](StateMachine::check_invariants);
//! a violation is a bug in the machine.
//!
//! `runtime::driver::Driver` is the one generic driver: it owns a machine and the shell's clock,
//! feeds inputs with the current time and checks invariants after each.

use crate::types::Millis;

/// A deterministic, sans-IO state machine.
pub trait StateMachine {
    /// What can happen to it.
    type Input;
    /// What it asks its shell to do.
    type Output;
    /// Reacts to one input at `now`; runs to completion.
    fn handle(&mut self, now: Millis, input: Self::Input, out: &mut Vec<Self::Output>);
    /// The earliest time it must be fed a tick, if any.
    fn next_deadline(&self) -> Option<Millis>;
    /// Cross-field invariants; panics on a violation.
    fn check_invariants(&self);
}
