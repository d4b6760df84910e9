//! A timer for the chores a reaper does less often than it passes (pruning, the unserved survey, the
//! gauges), tested on its own.

use std::time::{Duration, Instant};

/// A chore done at most once per period, on the passes that find it due: the first pass does it.
#[derive(Debug, Default)]
pub(super) struct Every {
    last: std::sync::Mutex<Option<Instant>>,
}

impl Every {
    /// True when `period` has passed since the last time this said true (or it never did), and
    /// then counts from now.
    pub(super) fn due(&self, period: Duration) -> bool {
        let mut last = crate::sync::lock(&self.last);
        let due = last.is_none_or(|t| t.elapsed() >= period);
        if due {
            *last = Some(Instant::now());
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chore_is_due_on_the_first_pass_then_once_per_period() {
        let hourly = Every::default();
        assert!(hourly.due(Duration::from_secs(3600)));
        assert!(!hourly.due(Duration::from_secs(3600)));
        let always = Every::default();
        assert!(always.due(Duration::ZERO) && always.due(Duration::ZERO));
    }
}
