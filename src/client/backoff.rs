//! Kafka's exponential retry backoff (KIP-580, Kafka 3.7; `ExponentialBackoff` in
//! kafka-clients): the wait before attempt `n + 1` is
//! `retry.backoff.ms × 2^n × random(0.8, 1.2)`, at most `retry.backoff.max.ms`. When
//! `retry.backoff.max.ms` is not above `retry.backoff.ms`, every wait is the smaller of the two
//! (Kafka's constant backoff).
//!
//! The randomness is an input, so the sans-IO cores draw it from their seeded generator and the
//! simulator replays it.

/// Kafka's `CommonClientConfigs.RETRY_BACKOFF_EXP_BASE`.
const MULTIPLIER: f64 = 2.0;
/// Kafka's `CommonClientConfigs.RETRY_BACKOFF_JITTER`.
const JITTER: f64 = 0.2;

/// The backoff of one client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExponentialBackoff {
    initial_ms: u64,
    max_ms: u64,
}

impl ExponentialBackoff {
    /// From `retry.backoff.ms` and `retry.backoff.max.ms`.
    pub fn new(initial_ms: u64, max_ms: u64) -> ExponentialBackoff {
        ExponentialBackoff {
            initial_ms: initial_ms.min(max_ms),
            max_ms,
        }
    }

    /// The wait after `attempts` failed attempts beyond the first (0 for the first retry),
    /// with `random` a uniformly drawn 64-bit value.
    pub fn backoff_ms(&self, attempts: u32, random: u64) -> u64 {
        if self.max_ms <= self.initial_ms {
            return self.initial_ms;
        }
        let exp_max = (self.max_ms as f64 / self.initial_ms.max(1) as f64).log(MULTIPLIER);
        let exp = f64::from(attempts).min(exp_max);
        let term = self.initial_ms as f64 * MULTIPLIER.powf(exp);
        // The top 53 bits as a fraction in [0, 1): the same spread as Java's nextDouble.
        let unit = (random >> 11) as f64 / (1u64 << 53) as f64;
        let factor = 1.0 - JITTER + 2.0 * JITTER * unit;
        ((factor * term) as u64).min(self.max_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOW: u64 = 0;
    const MIDDLE: u64 = 1 << 63;
    const HIGH: u64 = u64::MAX;

    #[test]
    fn the_wait_doubles_from_retry_backoff_ms_up_to_the_max() {
        let backoff = ExponentialBackoff::new(100, 1_000);
        let waits: Vec<u64> = (0..6).map(|n| backoff.backoff_ms(n, MIDDLE)).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1_000, 1_000]);
    }

    #[test]
    fn jitter_spreads_each_wait_by_a_fifth_either_way_but_never_past_the_max() {
        let backoff = ExponentialBackoff::new(100, 1_000);
        assert_eq!(backoff.backoff_ms(0, LOW), 80);
        assert_eq!(backoff.backoff_ms(0, HIGH), 120);
        assert_eq!(backoff.backoff_ms(2, LOW), 320);
        assert_eq!(backoff.backoff_ms(9, LOW), 800, "capped term, jitter below");
        assert_eq!(backoff.backoff_ms(9, HIGH), 1_000, "never above the max");
    }

    #[test]
    fn a_max_not_above_the_initial_wait_is_a_constant_backoff() {
        assert_eq!(ExponentialBackoff::new(100, 100).backoff_ms(5, HIGH), 100);
        assert_eq!(ExponentialBackoff::new(500, 100).backoff_ms(0, LOW), 100);
        assert_eq!(ExponentialBackoff::new(0, 0).backoff_ms(3, HIGH), 0);
    }
}
