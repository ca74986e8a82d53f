//! The shells' clock: milliseconds since a start instant (simulated under madsim), the `now`
//! that state machines take as input, and sleeping until a state machine's next deadline.

use std::time::Duration;

use crate::types::Millis;

/// Wall-clock milliseconds since the Unix epoch, for the clock-time parts of Kafka's contract
/// (record CreateTime, retention by time). Under madsim `SystemTime` is simulated (it starts at
/// a date drawn from the seed), so a run still replays byte for byte; state machines take it as
/// an input, never read it.
#[allow(clippy::disallowed_methods)]
pub fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as i64)
}

/// Milliseconds since the shell started.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    start: tokio::time::Instant,
}

impl Clock {
    /// A clock whose zero is now.
    pub(crate) fn start() -> Clock {
        Clock {
            start: tokio::time::Instant::now(),
        }
    }

    /// Milliseconds since the start.
    pub(crate) fn now(self) -> Millis {
        Millis(self.elapsed().as_millis() as u64)
    }

    #[cfg(not(madsim))]
    fn elapsed(self) -> Duration {
        self.start.elapsed()
    }

    /// Under madsim, `Instant::now` is its `clock_gettime` hook (a handle lookup and two
    /// conversions); the time handle's own instant is the same value, read directly.
    #[cfg(madsim)]
    fn elapsed(self) -> Duration {
        madsim::time::TimeHandle::current()
            .now_instant()
            .duration_since(self.start)
    }

    /// Sleeps until `deadline`; callers guard `select!` arms with `deadline.is_some()`.
    pub(crate) async fn sleep_until(self, deadline: Option<Millis>) {
        let deadline = deadline.expect("guarded by the select precondition");
        tokio::time::sleep_until(self.start + Duration::from_millis(deadline.0)).await;
    }
}
