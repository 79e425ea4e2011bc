//! The lifecycle decision: an active task with no update for a while is paused; a completed
//! task older than a while is archived (hidden from default listings, still readable). Time comes
//! from an injected [`Clock`], so tests move it forward instead of sleeping.

use chrono::{DateTime, Duration, Utc};

/// Where "now" comes from.
pub trait Clock: Send + Sync {
    fn now(&self) -> DateTime<Utc>;
}

/// The wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that says what it is told (tests, replays).
#[derive(Debug, Clone, Copy)]
pub struct FixedClock(pub DateTime<Utc>);

impl Clock for FixedClock {
    fn now(&self) -> DateTime<Utc> {
        self.0
    }
}

/// How long before the sweeper acts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// An active task not updated for this long is paused.
    pub pause_after: Duration,
    /// A completed task whose completion is this old is archived.
    pub archive_after: Duration,
}

impl Thresholds {
    /// From whole seconds (as configured); values past what a duration holds saturate.
    pub fn from_secs(pause_after: u64, archive_after: u64) -> Self {
        let secs = |s: u64| {
            i64::try_from(s)
                .ok()
                .and_then(Duration::try_seconds)
                .unwrap_or(Duration::MAX)
        };
        Thresholds {
            pause_after: secs(pause_after),
            archive_after: secs(archive_after),
        }
    }

    /// The instants before which a task is stale: (`updated_at` for pausing, `completed_at` for
    /// archiving). The SQL sweep compares with these.
    pub fn cutoffs(&self, now: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
        let back = |d: Duration| {
            now.checked_sub_signed(d)
                .unwrap_or(DateTime::<Utc>::MIN_UTC)
        };
        (back(self.pause_after), back(self.archive_after))
    }
}

/// A threshold in words for messages: `24 h`, `90 min`, `45 s`.
pub fn describe(d: Duration) -> String {
    let secs = d.num_seconds();
    if secs >= 3600 && secs % 3600 == 0 {
        format!("{} h", secs / 3600)
    } else if secs >= 60 && secs % 60 == 0 {
        format!("{} min", secs / 60)
    } else {
        format!("{secs} s")
    }
}

/// What the sweeper does with one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Keep,
    Pause,
    Archive,
}

/// The task facts the decision needs.
#[derive(Debug, Clone, Copy)]
pub struct TaskClock<'a> {
    pub status: &'a str,
    pub updated_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
    pub archived: bool,
}

/// Decides one task: exactly the conditions of the SQL sweep (`updated_at < pause cutoff` for
/// active tasks; `coalesce(completed_at, updated_at) < archive cutoff` for completed ones).
pub fn decide(task: TaskClock<'_>, now: DateTime<Utc>, thresholds: &Thresholds) -> Decision {
    let (pause_before, archive_before) = thresholds.cutoffs(now);
    match task.status {
        "active" if task.updated_at < pause_before => Decision::Pause,
        "completed"
            if !task.archived && task.completed_at.unwrap_or(task.updated_at) < archive_before =>
        {
            Decision::Archive
        }
        _ => Decision::Keep,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap()
    }

    fn default() -> Thresholds {
        Thresholds::from_secs(24 * 3600, 7 * 24 * 3600)
    }

    #[test]
    fn active_tasks_pause_after_a_quiet_day() {
        let task = TaskClock {
            status: "active",
            updated_at: t0(),
            completed_at: None,
            archived: false,
        };
        let clock = FixedClock(t0() + Duration::hours(23));
        assert_eq!(decide(task, clock.now(), &default()), Decision::Keep);
        let clock = FixedClock(t0() + Duration::hours(24));
        assert_eq!(
            decide(task, clock.now(), &default()),
            Decision::Keep,
            "exactly the threshold is not past it"
        );
        let clock = FixedClock(t0() + Duration::hours(24) + Duration::seconds(1));
        assert_eq!(decide(task, clock.now(), &default()), Decision::Pause);
    }

    #[test]
    fn completed_tasks_archive_after_a_week_once() {
        let task = TaskClock {
            status: "completed",
            updated_at: t0(),
            completed_at: Some(t0() + Duration::days(1)),
            archived: false,
        };
        let now = t0() + Duration::days(7) + Duration::hours(1);
        assert_eq!(
            decide(task, now, &default()),
            Decision::Keep,
            "age counts from completion"
        );
        let now = t0() + Duration::days(8) + Duration::hours(1);
        assert_eq!(decide(task, now, &default()), Decision::Archive);
        let archived = TaskClock {
            archived: true,
            ..task
        };
        assert_eq!(decide(archived, now, &default()), Decision::Keep);
    }

    #[test]
    fn other_statuses_stay() {
        let now = t0() + Duration::days(365);
        for status in ["paused", "failed", "cancelled"] {
            let task = TaskClock {
                status,
                updated_at: t0(),
                completed_at: Some(t0()),
                archived: false,
            };
            assert_eq!(decide(task, now, &default()), Decision::Keep, "{status}");
        }
    }

    #[test]
    fn thresholds_read_well() {
        assert_eq!(describe(Duration::hours(24)), "24 h");
        assert_eq!(describe(Duration::minutes(90)), "90 min");
        assert_eq!(describe(Duration::seconds(45)), "45 s");
        assert_eq!(describe(Duration::seconds(3601)), "3601 s");
    }

    #[test]
    fn thresholds_are_configurable_and_saturate() {
        let short = Thresholds::from_secs(60, 120);
        let task = TaskClock {
            status: "active",
            updated_at: t0(),
            completed_at: None,
            archived: false,
        };
        assert_eq!(
            decide(task, t0() + Duration::seconds(61), &short),
            Decision::Pause
        );
        let huge = Thresholds::from_secs(u64::MAX, u64::MAX);
        let (p, a) = huge.cutoffs(t0());
        assert!(p < t0() && a < t0());
        assert!(SystemClock.now() > t0() - Duration::days(36500));
    }
}
