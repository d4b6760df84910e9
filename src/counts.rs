//! Reports of counters (a worker's, a pass's) as people read them in logs: `claimed=12 done=11
//! retried=1`, the counters that are not zero, in order; `nothing` when all are.

use std::fmt;

/// Writes the non-zero `counters` as `name=value`, separated by spaces, or `nothing`.
pub(crate) fn write(f: &mut fmt::Formatter<'_>, counters: &[(&str, u64)]) -> fmt::Result {
    let mut any = false;
    for (name, value) in counters.iter().filter(|(_, v)| *v > 0) {
        if any {
            f.write_str(" ")?;
        }
        write!(f, "{name}={value}")?;
        any = true;
    }
    if !any {
        f.write_str("nothing")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    struct R(u64, u64);

    impl std::fmt::Display for R {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            super::write(f, &[("claimed", self.0), ("done", self.1)])
        }
    }

    #[test]
    fn zero_counters_are_left_out() {
        assert_eq!(R(3, 0).to_string(), "claimed=3");
        assert_eq!(R(3, 2).to_string(), "claimed=3 done=2");
        assert_eq!(R(0, 0).to_string(), "nothing");
    }
}
