//! Time source of the stores, and RFC 3339 formatting of UTC instants.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where a store reads the time: milliseconds since the Unix epoch, UTC.
///
/// Expiry and ledger retention are judged with it. Production uses [`SystemClock`]; tests inject a
/// [`ManualClock`] to step over a time to live without sleeping.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current instant in milliseconds since the Unix epoch.
    fn now_millis(&self) -> i64;
}

/// The operating system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> i64 {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(elapsed) => i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX),
            Err(before) => -i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX),
        }
    }
}

/// A clock that moves only when told to; clones share the same instant.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A clock stopped at `millis` since the Unix epoch.
    pub fn at_millis(millis: i64) -> Self {
        ManualClock(Arc::new(AtomicI64::new(millis)))
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(duration_millis(by), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_millis(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// A duration in whole milliseconds, saturating.
pub(crate) fn duration_millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Formats milliseconds since the Unix epoch as an RFC 3339 UTC timestamp with millisecond
/// precision, e.g. `2026-07-28T09:30:00.000Z`.
///
/// The conversion is the proleptic Gregorian civil-from-days algorithm; it is a few lines of
/// integer arithmetic, so no date crate is needed for the one format the stores emit.
pub fn format_rfc3339(millis: i64) -> String {
    let secs = millis.div_euclid(1000);
    let ms = millis.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute, second) = (sod / 3600, (sod % 3600) / 60, sod % 60);
    if !(0..=9999).contains(&year) {
        return format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{ms:03}Z");
    }
    // Every read and mutation formats an expiry: the digits are written in place, which costs a
    // fraction of the formatting machinery.
    let mut text = *b"0000-00-00T00:00:00.000Z";
    for (at, width, value) in [
        (0, 4, year),
        (5, 2, month),
        (8, 2, day),
        (11, 2, hour),
        (14, 2, minute),
        (17, 2, second),
        (20, 3, ms),
    ] {
        let mut value = value;
        for digit in text[at..at + width].iter_mut().rev() {
            *digit = b'0' + (value % 10) as u8;
            value /= 10;
        }
    }
    String::from_utf8(text.to_vec()).expect("ASCII digits and separators")
}

fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(
            format_rfc3339(1_785_231_000_123),
            "2026-07-28T09:30:00.123Z"
        );
        assert_eq!(format_rfc3339(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(
            format_rfc3339(4_102_444_799_000),
            "2099-12-31T23:59:59.000Z"
        );
        assert_eq!(
            format_rfc3339(253_402_300_799_999),
            "9999-12-31T23:59:59.999Z"
        );
        assert_eq!(
            format_rfc3339(253_402_300_800_000),
            "10000-01-01T00:00:00.000Z"
        );
        assert_eq!(
            format_rfc3339(-62_167_219_200_001),
            "-001-12-31T23:59:59.999Z"
        );
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::at_millis(10);
        let shared = clock.clone();
        assert_eq!(clock.now_millis(), 10);
        shared.advance(Duration::from_secs(2));
        assert_eq!(clock.now_millis(), 2010);
    }
}
