//! openraft's async runtime: tokio in the real world; madsim's tasks, clock and seeded RNG in
//! the simulator, so that a controller quorum replays from its seed like everything else.

#[cfg(not(madsim))]
pub(crate) type Rt = openraft::TokioRuntime;

#[cfg(madsim)]
pub(crate) type Rt = sim::MadsimRuntime;

#[cfg(madsim)]
mod sim {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use std::time::Duration;

    use openraft::async_runtime::TokioOneShotSender;
    use openraft::{AsyncRuntime, OptionalSend, TokioInstant};

    /// openraft on madsim: spawn, sleep, timeouts and randomness all come from the simulator.
    #[derive(Debug, Default, PartialEq, Eq)]
    pub(crate) struct MadsimRuntime;

    /// A future with a deadline (madsim's own `timeout` returns an unnameable type).
    pub(crate) struct Timeout<T> {
        future: Pin<Box<T>>,
        sleep: Pin<Box<madsim::time::Sleep>>,
    }

    impl<T: Future> Future for Timeout<T> {
        type Output = Result<T::Output, madsim::time::error::Elapsed>;

        fn poll(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Self::Output> {
            if let Poll::Ready(output) = self.future.as_mut().poll(context) {
                return Poll::Ready(Ok(output));
            }
            match self.sleep.as_mut().poll(context) {
                Poll::Ready(()) => Poll::Ready(Err(madsim::time::error::Elapsed)),
                Poll::Pending => Poll::Pending,
            }
        }
    }

    impl AsyncRuntime for MadsimRuntime {
        type JoinError = madsim::task::JoinError;
        type JoinHandle<T: OptionalSend + 'static> = madsim::task::JoinHandle<T>;
        type Sleep = madsim::time::Sleep;
        type Instant = TokioInstant;
        type TimeoutError = madsim::time::error::Elapsed;
        type Timeout<R, T: Future<Output = R> + OptionalSend> = Timeout<T>;
        type ThreadLocalRng = madsim::rand::GlobalRng;
        type OneshotSender<T: OptionalSend> = TokioOneShotSender<T>;
        type OneshotReceiverError = tokio::sync::oneshot::error::RecvError;
        type OneshotReceiver<T: OptionalSend> = tokio::sync::oneshot::Receiver<T>;

        fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
        where
            T: Future + OptionalSend + 'static,
            T::Output: OptionalSend + 'static,
        {
            madsim::task::spawn(future)
        }

        fn sleep(duration: Duration) -> Self::Sleep {
            madsim::time::sleep(duration)
        }

        fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
            madsim::time::sleep_until(deadline.into_std())
        }

        fn timeout<R, F: Future<Output = R> + OptionalSend>(
            duration: Duration,
            future: F,
        ) -> Self::Timeout<R, F> {
            Timeout {
                future: Box::pin(future),
                sleep: Box::pin(madsim::time::sleep(duration)),
            }
        }

        fn timeout_at<R, F: Future<Output = R> + OptionalSend>(
            deadline: Self::Instant,
            future: F,
        ) -> Self::Timeout<R, F> {
            Timeout {
                future: Box::pin(future),
                sleep: Box::pin(madsim::time::sleep_until(deadline.into_std())),
            }
        }

        fn is_panic(join_error: &Self::JoinError) -> bool {
            join_error.is_panic()
        }

        fn thread_rng() -> Self::ThreadLocalRng {
            madsim::rand::thread_rng()
        }

        fn oneshot<T>() -> (Self::OneshotSender<T>, Self::OneshotReceiver<T>)
        where
            T: OptionalSend,
        {
            let (sender, receiver) = tokio::sync::oneshot::channel();
            (TokioOneShotSender(sender), receiver)
        }
    }
}
