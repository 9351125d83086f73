//! Resumption records, as values and files: what a worker believed about a resource (its handle, the version and
//! validator it saw, its lifecycle and expiry, what it meant to do next), saved so that the next
//! worker, or the same one after a restart, revalidates before acting.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::error::{RECORD_FORMAT as FORMAT, RecordError};
use crate::store::{Lifecycle, Resumption};

/// Where to resume from: the resource a worker acted on, the version (and the server-issued
/// validator) it last saw, its lifecycle and expiry then, and the next operation it meant to
/// run. It is not an access token (the server still checks the caller on every call) and not a
/// cache of the state: it says what to revalidate ([`Harness::resume`](super::Harness::resume)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ResumptionRecord {
    /// The record format, `mcp-tools/resumption@1`.
    pub format: String,
    /// The server the record was made with (its `serverInfo.name`, else its endpoint).
    pub server: String,
    /// The kind of resource, e.g. `basket`.
    pub resource: String,
    /// The resource's handle.
    pub handle: String,
    /// The version the worker last saw.
    pub basis_version: u64,
    /// The server's validator for that version, when it issued one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validator: Option<String>,
    /// The lifecycle at that version.
    pub lifecycle: Lifecycle,
    /// When the resource expires (RFC 3339, UTC), if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// What the worker meant to do next, in its own words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_operation: Option<String>,
}

impl ResumptionRecord {
    pub(super) fn new(
        server: &str,
        resource: &str,
        resumption: &Resumption,
        next_operation: Option<String>,
    ) -> ResumptionRecord {
        ResumptionRecord {
            format: FORMAT.to_owned(),
            server: server.to_owned(),
            resource: resource.to_owned(),
            handle: resumption.handle.clone(),
            basis_version: resumption.basis_version,
            validator: resumption.validator.clone(),
            lifecycle: resumption.lifecycle,
            expires_at: resumption.expires_at.clone(),
            next_operation,
        }
    }

    /// The record with what the worker means to do next.
    pub fn with_next_operation(mut self, next: impl Into<String>) -> ResumptionRecord {
        self.next_operation = Some(next.into());
        self
    }

    /// The record as JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a record serializes")
    }

    /// Reads a record from JSON text, refusing one that is cut short, altered or of another
    /// format.
    pub fn from_json(text: &str) -> Result<ResumptionRecord, RecordError> {
        let value: Value = serde_json::from_str(text)
            .map_err(|error| RecordError::Malformed(format!("not JSON: {error}")))?;
        ResumptionRecord::from_value(value)
    }

    fn from_value(value: Value) -> Result<ResumptionRecord, RecordError> {
        match value.get("format") {
            Some(Value::String(format)) if format == FORMAT => {}
            Some(Value::String(format)) => {
                return Err(RecordError::Format {
                    found: format.clone(),
                });
            }
            _ => {
                return Err(RecordError::Malformed(
                    "no `format`: not a resumption record of this library".into(),
                ));
            }
        }
        let record: ResumptionRecord = serde_json::from_value(value)
            .map_err(|error| RecordError::Malformed(error.to_string()))?;
        let empty = [
            ("server", &record.server),
            ("resource", &record.resource),
            ("handle", &record.handle),
        ]
        .into_iter()
        .find(|(_, value)| value.trim().is_empty());
        if let Some((field, _)) = empty {
            return Err(RecordError::Malformed(format!("an empty `{field}`")));
        }
        if record.basis_version == 0 {
            return Err(RecordError::Malformed(
                "`basis_version` 0: versions start at 1".into(),
            ));
        }
        if record.validator.as_deref().is_some_and(str::is_empty) {
            return Err(RecordError::Malformed("an empty `validator`".into()));
        }
        if let Some(expires_at) = &record.expires_at
            && rfc3339_millis(expires_at).is_none()
        {
            return Err(RecordError::Malformed(format!(
                "`expires_at` {expires_at:?} is not an RFC 3339 UTC time"
            )));
        }
        Ok(record)
    }

    /// Whether the record's expiry has passed by this machine's clock.
    pub(super) fn expired(&self) -> bool {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|since| i64::try_from(since.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        self.expires_at
            .as_deref()
            .and_then(rfc3339_millis)
            .is_some_and(|expires| expires <= now)
    }
}

/// Writes `records` to the file at `path`, replacing it whole (a new file renamed over the old
/// one: a crash leaves the old file or the new one, never half of one).
pub fn save_records(path: &Path, records: &[ResumptionRecord]) -> Result<(), RecordError> {
    let text = serde_json::to_string_pretty(&json!({ "format": FORMAT, "records": records }))
        .expect("records serialize");
    let failed = |source| RecordError::Io {
        path: path.to_owned(),
        source,
    };
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(format!(".{}.tmp", std::process::id()));
    std::fs::write(&temporary, text).map_err(failed)?;
    std::fs::rename(&temporary, path).map_err(|error| {
        let _ = std::fs::remove_file(&temporary);
        failed(error)
    })
}

/// Reads the records of the file at `path` ([`save_records`]); a file that is not one, or any
/// record in it that is not, is refused whole.
pub fn load_records(path: &Path) -> Result<Vec<ResumptionRecord>, RecordError> {
    let text = std::fs::read_to_string(path).map_err(|source| RecordError::Io {
        path: path.to_owned(),
        source,
    })?;
    let value: Value = serde_json::from_str(&text).map_err(|error| {
        RecordError::Malformed(format!("{}: not JSON: {error}", path.display()))
    })?;
    match value.get("format") {
        Some(Value::String(format)) if format == FORMAT => {}
        Some(Value::String(format)) => {
            return Err(RecordError::Format {
                found: format.clone(),
            });
        }
        _ => {
            return Err(RecordError::Malformed(format!(
                "{}: no `format`: not a file of resumption records",
                path.display()
            )));
        }
    }
    let Some(Value::Array(records)) = value.get("records") else {
        return Err(RecordError::Malformed(format!(
            "{}: no `records` list",
            path.display()
        )));
    };
    records
        .iter()
        .cloned()
        .map(ResumptionRecord::from_value)
        .collect()
}

/// Milliseconds since the Unix epoch of an RFC 3339 UTC time (`2026-07-28T09:30:00.000Z`), as
/// the stores write it; `None` for anything else.
fn rfc3339_millis(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    let separators = [(4, b'-'), (7, b'-'), (13, b':'), (16, b':')];
    if bytes.len() < 20
        || separators.iter().any(|(at, byte)| bytes[*at] != *byte)
        || !matches!(bytes[10], b'T' | b't')
    {
        return None;
    }
    let number = |from: usize, to: usize| -> Option<i64> {
        let digits = text.get(from..to)?;
        digits
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| digits.parse().ok())
            .flatten()
    };
    let (year, month, day) = (number(0, 4)?, number(5, 7)?, number(8, 10)?);
    let (hour, minute, second) = (number(11, 13)?, number(14, 16)?, number(17, 19)?);
    let in_range = (1..=12).contains(&month)
        && (1..=31).contains(&day)
        && hour < 24
        && minute < 60
        && second < 61;
    if !in_range {
        return None;
    }
    let rest = &text[19..];
    let (fraction, zone) = match rest.strip_prefix('.') {
        Some(rest) => {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return None;
            }
            (&rest[..digits], &rest[digits..])
        }
        None => ("", rest),
    };
    if !matches!(zone, "Z" | "z" | "+00:00") {
        return None;
    }
    let millis: i64 = format!("{fraction:0<3}")[..3].parse().ok()?;
    // Days from the civil date (proleptic Gregorian), March-based years.
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    Some(((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> ResumptionRecord {
        ResumptionRecord::new(
            "basket",
            "basket",
            &Resumption {
                handle: "bsk_42".into(),
                basis_version: 7,
                lifecycle: Lifecycle::Active,
                expires_at: Some("2026-07-31T18:00:00.000Z".into()),
                validator: Some("v1.abc".into()),
            },
            Some("compare_configurations".into()),
        )
    }

    #[test]
    fn records_round_trip_and_refuse_what_they_are_not() {
        let record = record();
        assert_eq!(
            ResumptionRecord::from_json(&record.to_json()).unwrap(),
            record
        );
        let text = record.to_json();
        for (broken, why) in [
            (text[..text.len() / 2].to_owned(), "cut short"),
            (text.replace("\"bsk_42\"", "\"\""), "an empty handle"),
            (
                text.replace("\"basis_version\": 7", "\"basis_version\": 0"),
                "version 0",
            ),
            (
                text.replace("\"basis_version\": 7", "\"basis_version\": \"7\""),
                "a string version",
            ),
            (text.replace("active", "finished"), "an unknown lifecycle"),
            (
                text.replace("2026-07-31T18:00:00.000Z", "tomorrow"),
                "a bad expiry",
            ),
            (
                "{\"resource\": \"bsk_42\"}".to_owned(),
                "another kind of file",
            ),
            ("[]".to_owned(), "a list"),
        ] {
            assert!(
                matches!(
                    ResumptionRecord::from_json(&broken),
                    Err(RecordError::Malformed(_))
                ),
                "{why}: {broken}"
            );
        }
        let other = text.replace(FORMAT, "mcp-tools/resumption@9");
        assert!(matches!(
            ResumptionRecord::from_json(&other),
            Err(RecordError::Format { .. })
        ));
    }

    #[test]
    fn times_are_read_as_the_stores_write_them() {
        assert_eq!(rfc3339_millis("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(rfc3339_millis("1970-01-01T00:00:01.5Z"), Some(1500));
        assert_eq!(
            rfc3339_millis(&crate::store::clock::format_rfc3339(1_785_000_123_456)),
            Some(1_785_000_123_456)
        );
        assert_eq!(
            rfc3339_millis(&crate::store::clock::format_rfc3339(951_782_400_000)),
            Some(951_782_400_000),
            "29 February 2000"
        );
        for bad in [
            "2026-07-31",
            "2026-13-01T00:00:00Z",
            "2026-07-31T18:00:00+02:00",
            "2026-07-31T18:00:00.Z",
        ] {
            assert_eq!(rfc3339_millis(bad), None, "{bad}");
        }
    }
}
