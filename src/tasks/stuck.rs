//! The stuck-alert cooldown: a `stuck` message records its time as `last_stuck_alert_at` in the
//! task metadata (epoch seconds, like `last_wait_event_at`); another `stuck` message of the task
//! before `MNEMO_TASKS_STUCK_COOLDOWN_SECS` have passed is suppressed instead of stored. Pure; the
//! handler reads and writes the metadata under the task's row lock, so two alerts at once cannot
//! both pass.

use chrono::{DateTime, Duration, Utc};
use serde_json::{Map, Value};

/// The metadata key holding the time of the last stored `stuck` message.
pub const KEY: &str = "last_stuck_alert_at";

/// When the last stored `stuck` message arrived, if the metadata says so (a damaged value counts
/// as none).
pub fn last_alert(metadata: &Map<String, Value>) -> Option<DateTime<Utc>> {
    let seconds = metadata.get(KEY)?.as_f64()?;
    if !seconds.is_finite() {
        return None;
    }
    // Saturating float-to-int conversion; out-of-range times are refused below.
    DateTime::from_timestamp_millis((seconds * 1000.0).round() as i64)
}

/// The end of the cooldown when a `stuck` message at `now` falls inside it (so it is to be
/// suppressed), `None` when it is to be stored. A zero cooldown never suppresses.
pub fn suppressed_until(
    metadata: &Map<String, Value>,
    now: DateTime<Utc>,
    cooldown_secs: u64,
) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
    if cooldown_secs == 0 {
        return None;
    }
    let last = last_alert(metadata)?;
    let cooldown = i64::try_from(cooldown_secs)
        .ok()
        .and_then(Duration::try_seconds)?;
    let ends = last.checked_add_signed(cooldown)?;
    (now < ends).then_some((last, ends))
}

/// Records a stored `stuck` message at `at`; other keys stay.
pub fn record(metadata: &mut Map<String, Value>, at: DateTime<Utc>) {
    let seconds = at.timestamp_millis() as f64 / 1000.0;
    metadata.insert(
        KEY.into(),
        serde_json::Number::from_f64(seconds).map_or(Value::Null, Value::Number),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::json;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap()
    }

    #[test]
    fn an_alert_inside_the_cooldown_is_suppressed_until_it_ends() {
        let mut meta = Map::new();
        meta.insert("display".into(), json!(":1"));
        assert_eq!(suppressed_until(&meta, t0(), 300), None, "no alert yet");
        record(&mut meta, t0() + Duration::milliseconds(250));
        assert_eq!(meta["display"], json!(":1"));
        let last = t0() + Duration::milliseconds(250);
        assert_eq!(last_alert(&meta), Some(last));
        let ends = last + Duration::seconds(300);
        assert_eq!(
            suppressed_until(&meta, t0() + Duration::seconds(10), 300),
            Some((last, ends))
        );
        assert_eq!(
            suppressed_until(&meta, ends - Duration::milliseconds(1), 300),
            Some((last, ends))
        );
        assert_eq!(suppressed_until(&meta, ends, 300), None, "the end is free");
        assert_eq!(suppressed_until(&meta, t0(), 0), None, "0 turns it off");
    }

    #[test]
    fn damaged_values_count_as_no_alert() {
        for bad in [json!("yesterday"), json!(null), json!(1e300), json!([1])] {
            let mut meta = Map::new();
            meta.insert(KEY.into(), bad.clone());
            assert_eq!(suppressed_until(&meta, t0(), 300), None, "{bad}");
        }
        // A cooldown past what a duration holds does not panic.
        let mut meta = Map::new();
        record(&mut meta, t0());
        assert_eq!(suppressed_until(&meta, t0(), u64::MAX), None);
    }
}
