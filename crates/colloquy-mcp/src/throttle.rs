//! A call's progress, throttled (pure): at most one update per interval, the latest held
//! until the interval has passed, so a flood of notifications costs a handful of updates.

use std::time::Duration;

use tokio::time::Instant;

/// One call's throttle.
#[derive(Debug)]
pub(crate) struct Throttle {
    interval: Duration,
    last: Option<Instant>,
    held: Option<String>,
}

impl Throttle {
    pub(crate) fn new(interval: Duration) -> Self {
        Self { interval, last: None, held: None }
    }

    /// A notification's text arrives at `now`: the update to send now, if any; otherwise it
    /// is held (replacing any held before it).
    pub(crate) fn offer(&mut self, now: Instant, text: String) -> Option<String> {
        match self.last {
            Some(last) if now < last + self.interval => {
                self.held = Some(text);
                None
            }
            _ => {
                self.last = Some(now);
                self.held = None;
                Some(text)
            }
        }
    }

    /// When the held update may go, if one is held.
    pub(crate) fn due(&self) -> Option<Instant> {
        self.held.as_ref().and(self.last).map(|last| last + self.interval)
    }

    /// The held update, to send at `now` (its due time).
    pub(crate) fn release(&mut self, now: Instant) -> Option<String> {
        let text = self.held.take()?;
        self.last = Some(now);
        Some(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_update_per_interval_and_the_latest_wins() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut throttle = Throttle::new(Duration::from_secs(1));
        assert_eq!(throttle.offer(at(0), "1".into()).as_deref(), Some("1"));
        assert_eq!(throttle.due(), None);
        for n in 2..=10_000 {
            assert_eq!(throttle.offer(at(1 + n / 100), n.to_string()), None);
        }
        assert_eq!(throttle.due(), Some(at(1000)));
        assert_eq!(throttle.release(at(1000)).as_deref(), Some("10000"));
        assert_eq!(throttle.due(), None);
        // Within the next interval: held again; after it: at once.
        assert_eq!(throttle.offer(at(1500), "a".into()), None);
        assert_eq!(throttle.offer(at(2000), "b".into()).as_deref(), Some("b"));
        assert_eq!(throttle.due(), None, "the newer update replaced the held one");
    }

    #[test]
    fn a_zero_interval_lets_every_update_through() {
        let now = Instant::now();
        let mut throttle = Throttle::new(Duration::ZERO);
        assert!(throttle.offer(now, "1".into()).is_some());
        assert!(throttle.offer(now, "2".into()).is_some());
    }
}
