//! Reports of counters (a worker's, a pass's) as people read them in logs: `claimed=12 done=11
//! retried=1`, the counters that are not zero, in order; `nothing` when all are. In a log line the
//! counters are the event's fields, not text in its message, so that `--log-format json` gives them as
//! numbers a log pipeline can sum: [`counters!`] writes both from one list of a report's fields.

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

/// A counter as a log field: recorded when not zero, left out of the line when zero.
pub(crate) fn nonzero(n: u64) -> Option<u64> {
    (n > 0).then_some(n)
}

/// A report logged as one event whose fields are its non-zero counters.
pub(crate) trait Logged {
    /// Logs `message` with the counters as fields: at debug level when `quiet`, else at info.
    fn log(&self, message: &str, quiet: bool);
}

/// `counters!(Report { a, b, c })`: `Display` as `a=1 c=3` (see [`write`]) and [`Logged`] with the
/// fields `a`, `b`, `c`, from the one list of the report's `u64` fields.
macro_rules! counters {
    ($report:ty { $($field:ident),+ $(,)? }) => {
        impl std::fmt::Display for $report {
            /// The counters that are not zero, as `name=value`.
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                $crate::counts::write(f, &[$((stringify!($field), self.$field)),+])
            }
        }

        impl $crate::counts::Logged for $report {
            fn log(&self, message: &str, quiet: bool) {
                if quiet {
                    tracing::debug!($($field = $crate::counts::nonzero(self.$field),)+ "{message}");
                } else {
                    tracing::info!($($field = $crate::counts::nonzero(self.$field),)+ "{message}");
                }
            }
        }
    };
}
pub(crate) use counters;

#[cfg(test)]
mod tests {
    struct R(u64, u64);

    impl std::fmt::Display for R {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            super::write(f, &[("claimed", self.0), ("done", self.1)])
        }
    }

    #[derive(Default)]
    struct Pass {
        found: u64,
        fixed: u64,
    }
    super::counters!(Pass { found, fixed });

    #[test]
    fn a_report_is_its_non_zero_counters_in_text_and_in_log_fields() {
        use super::Logged;
        use std::sync::{Arc, Mutex};
        assert_eq!(Pass { found: 2, fixed: 0 }.to_string(), "found=2");
        assert_eq!(Pass::default().to_string(), "nothing");

        /// Collects each event's fields as `name=value`.
        #[derive(Clone, Default)]
        struct Fields(Arc<Mutex<Vec<String>>>);
        impl tracing::field::Visit for Fields {
            fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
                self.0
                    .lock()
                    .unwrap()
                    .push(format!("{}={value}", field.name()));
            }
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0
                    .lock()
                    .unwrap()
                    .push(format!("{}={value:?}", field.name()));
            }
        }
        impl tracing::Subscriber for Fields {
            fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
                true
            }
            fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
                tracing::span::Id::from_u64(1)
            }
            fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
            fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
            fn event(&self, event: &tracing::Event<'_>) {
                event.record(&mut self.clone());
            }
            fn enter(&self, _: &tracing::span::Id) {}
            fn exit(&self, _: &tracing::span::Id) {}
        }
        let fields = Fields::default();
        tracing::subscriber::with_default(fields.clone(), || {
            Pass { found: 2, fixed: 0 }.log("reaper pass", false);
        });
        let mut got = fields.0.lock().unwrap().clone();
        got.sort();
        assert_eq!(
            got,
            ["found=2", "message=reaper pass"],
            "zero counters are no fields, the others are numbers"
        );
    }

    #[test]
    fn zero_counters_are_left_out() {
        assert_eq!(R(3, 0).to_string(), "claimed=3");
        assert_eq!(R(3, 2).to_string(), "claimed=3 done=2");
        assert_eq!(R(0, 0).to_string(), "nothing");
    }
}
