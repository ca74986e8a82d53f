//! The one generic driver: a [`StateMachine`] with the shell's clock. Every shell (the broker's
//! driver task, the producer task, the consumer) feeds inputs through [`Driver::step`], which
//! stamps them with the current time and checks the machine's invariants after each, and sleeps
//! until [`Driver::wake`] when it waits for nothing else.

use crate::runtime::clock::Clock;
use crate::state_machine::StateMachine;
use crate::types::Millis;

/// A state machine and its clock.
#[derive(Debug)]
pub(crate) struct Driver<M> {
    machine: M,
    clock: Clock,
}

impl<M: StateMachine> Driver<M> {
    /// Drives `machine` on `clock`.
    pub(crate) fn new(machine: M, clock: Clock) -> Driver<M> {
        Driver { machine, clock }
    }

    /// The machine, for queries.
    pub(crate) fn machine(&self) -> &M {
        &self.machine
    }

    /// The clock (to sleep on in a `select!` arm).
    pub(crate) fn clock(&self) -> Clock {
        self.clock
    }

    /// Now, on the driver's clock.
    pub(crate) fn now(&self) -> Millis {
        self.clock.now()
    }

    /// Feeds one input at the current time, then checks the machine's invariants.
    pub(crate) fn step(&mut self, input: M::Input, out: &mut Vec<M::Output>) {
        self.machine.handle(self.clock.now(), input, out);
        self.machine.check_invariants();
    }

    /// When to feed a tick: the machine's next deadline or `also` (a caller's own deadline),
    /// whichever comes first.
    pub(crate) fn wake(&self, also: Option<Millis>) -> Option<Millis> {
        [self.machine.next_deadline(), also]
            .into_iter()
            .flatten()
            .min()
    }
}
