//! seedlog patch: the timer queue of `naive-timer 0.2` (a binary heap of deadlines, the
//! earliest first), with the wakers of sleeps stored as they are instead of boxed in a closure:
//! a sleep's timer is then no allocation. The heap is the same `BinaryHeap`, ordered by the
//! deadline alone and fed the same pushes and pops, so timers fire in the order they did.

use std::collections::BinaryHeap;
use std::task::Waker;
use std::{cmp::Ordering, time::Duration};

type Callback = Box<dyn FnOnce(Duration) + Send + Sync + 'static>;

/// What a timer does when it fires.
enum Action {
    Wake(Waker),
    Call(Callback),
}

struct Event {
    deadline: Duration,
    action: Action,
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.deadline.eq(&other.deadline)
    }
}

impl Eq for Event {}

impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Event {
    fn cmp(&self, other: &Event) -> Ordering {
        other.deadline.cmp(&self.deadline)
    }
}

/// Timers by deadline.
#[derive(Default)]
pub(crate) struct Timer {
    events: BinaryHeap<Event>,
}

impl Timer {
    /// Calls `callback` once `deadline` is reached.
    pub(crate) fn add(
        &mut self,
        deadline: Duration,
        callback: impl FnOnce(Duration) + Send + Sync + 'static,
    ) {
        self.events.push(Event {
            deadline,
            action: Action::Call(Box::new(callback)),
        });
    }

    /// Wakes `waker` once `deadline` is reached.
    pub(crate) fn add_waker(&mut self, deadline: Duration, waker: Waker) {
        self.events.push(Event {
            deadline,
            action: Action::Wake(waker),
        });
    }

    /// Fires every timer due at `now`, earliest first.
    pub(crate) fn expire(&mut self, now: Duration) {
        while let Some(event) = self.events.peek() {
            if event.deadline > now {
                break;
            }
            let event = self.events.pop().expect("peeked");
            match event.action {
                Action::Wake(waker) => waker.wake(),
                Action::Call(callback) => callback(now),
            }
        }
    }

    /// The earliest deadline.
    pub(crate) fn next(&self) -> Option<Duration> {
        self.events.peek().map(|event| event.deadline)
    }
}
