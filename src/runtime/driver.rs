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
    /// How many wake-ups in a row were due at once (see [`Driver::wake`]).
    due_at_once: u32,
}

/// Wake-ups due at once, in a row, that mean a machine asks for ticks it does not act on (a
/// busy loop: in the simulator, time stops and memory grows until the process is killed). A
/// tick moves a deadline it acted on into the future, so a legitimate run is a handful.
const BUSY_LOOP_WAKES: u32 = 100_000;

impl<M: StateMachine> Driver<M> {
    /// Drives `machine` on `clock`.
    pub(crate) fn new(machine: M, clock: Clock) -> Driver<M> {
        Driver {
            machine,
            clock,
            due_at_once: 0,
        }
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
    ///
    /// When the wake-up has been due at once [`BUSY_LOOP_WAKES`] times in a row, the machine
    /// keeps asking for a tick it does not act on and the loop would spin forever (freezing
    /// simulated time): the simulator and debug builds panic there, release builds log it.
    pub(crate) fn wake(&mut self, also: Option<Millis>) -> Option<Millis> {
        let wake = [self.machine.next_deadline(), also]
            .into_iter()
            .flatten()
            .min();
        let due = wake.and_then(|deadline| {
            let now = self.clock.now();
            (deadline <= now).then_some((deadline, now))
        });
        match due {
            Some((deadline, now)) => {
                self.due_at_once += 1;
                if self.due_at_once == BUSY_LOOP_WAKES {
                    let message = format!(
                        "busy loop: {BUSY_LOOP_WAKES} wake-ups in a row due at once at {now:?} \
                         (next deadline {deadline:?}); the machine asks for ticks it does not act on"
                    );
                    // The simulator and debug builds stop where the bug is; a production
                    // process says so and keeps serving.
                    #[cfg(any(madsim, debug_assertions))]
                    panic!("{message}");
                    #[cfg(not(any(madsim, debug_assertions)))]
                    tracing::error!("{message}");
                }
            }
            None => self.due_at_once = 0,
        }
        wake
    }
}

#[cfg(all(test, not(madsim)))]
mod tests {
    use super::*;

    /// A machine that always asks for a tick now and never acts on it.
    #[derive(Debug)]
    struct AlwaysDue;

    impl StateMachine for AlwaysDue {
        type Input = ();
        type Output = ();
        fn handle(&mut self, _now: Millis, (): (), _out: &mut Vec<()>) {}
        fn next_deadline(&self) -> Option<Millis> {
            Some(Millis(0))
        }
        fn check_invariants(&self) {}
    }

    #[test]
    #[should_panic(expected = "busy loop")]
    fn a_machine_that_never_moves_its_due_deadline_is_stopped() {
        let mut driver = Driver::new(AlwaysDue, Clock::start());
        let mut out = Vec::new();
        for _ in 0..BUSY_LOOP_WAKES {
            assert_eq!(driver.wake(None), Some(Millis(0)));
            driver.step((), &mut out);
        }
    }

    /// Due after an input that asks for it, quiet after a tick.
    #[derive(Debug)]
    struct DueOnRequest(bool);

    impl StateMachine for DueOnRequest {
        type Input = bool;
        type Output = ();
        fn handle(&mut self, _now: Millis, due: bool, _out: &mut Vec<()>) {
            self.0 = due;
        }
        fn next_deadline(&self) -> Option<Millis> {
            self.0.then_some(Millis(0))
        }
        fn check_invariants(&self) {}
    }

    #[test]
    fn a_machine_that_acts_on_each_tick_may_be_due_again_and_again() {
        let mut driver = Driver::new(DueOnRequest(true), Clock::start());
        let mut out = Vec::new();
        for _ in 0..2 * BUSY_LOOP_WAKES {
            assert_eq!(driver.wake(None), Some(Millis(0)));
            driver.step(false, &mut out);
            assert_eq!(driver.wake(None), None);
            driver.step(true, &mut out);
        }
    }
}
