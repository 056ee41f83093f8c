//! When a Kafka partition's open files are closed: whichever rule fires first.

use chrono::{Duration, TimeZone};
use chrono_tz::Tz;

/// One rule, checked against the open segment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rotation {
    /// `flush.size`: this many records.
    Records(u64),
    /// `rotate.interval.ms`: a record whose time is this far past the segment's first record
    /// starts a new segment; a partition that received nothing for this long is closed too.
    RecordTime(i64),
    /// `rotate.schedule.interval.ms`: wall-clock boundaries aligned in the time zone.
    WallClock(i64),
    /// Encoded bytes of the segment's files.
    Bytes(u64),
}

#[derive(Debug, Clone)]
pub struct RollingPolicy {
    pub rules: Vec<Rotation>,
    pub tz: Tz,
}

/// What the policy sees of a segment.
#[derive(Debug, Clone, Copy)]
pub struct SegmentStats {
    pub rows: u64,
    pub bytes: u64,
    pub opened_wall: i64,
    pub last_arrival_wall: i64,
}

impl RollingPolicy {
    pub fn records(&self) -> Option<u64> {
        self.rules.iter().find_map(|r| match r {
            Rotation::Records(n) => Some(*n),
            _ => None,
        })
    }

    pub fn record_time(&self) -> Option<i64> {
        self.rules.iter().find_map(|r| match r {
            Rotation::RecordTime(ms) => Some(*ms),
            _ => None,
        })
    }

    /// After rows were added: does the segment close now?
    pub fn full(&self, s: &SegmentStats) -> Option<Rotation> {
        self.rules.iter().copied().find(|r| match *r {
            Rotation::Records(n) => s.rows >= n,
            Rotation::Bytes(n) => s.bytes >= n,
            _ => false,
        })
    }

    /// On the clock: does the segment close now, without a new record?
    pub fn due(&self, s: &SegmentStats, now: i64) -> Option<Rotation> {
        self.rules.iter().copied().find(|r| match *r {
            Rotation::RecordTime(ms) => now - s.last_arrival_wall >= ms,
            Rotation::WallClock(ms) => now >= self.next_boundary(s.opened_wall, ms),
            _ => false,
        })
    }

    /// The first boundary after `opened`: the start of the local day plus a multiple of the
    /// period, capped at the next local midnight (Kafka Connect's `DateTimeUtils`).
    pub fn next_boundary(&self, opened: i64, period: i64) -> i64 {
        let Some(t) = self.tz.timestamp_millis_opt(opened).single() else {
            return opened + period;
        };
        let day = t.date_naive();
        let start_of_day = self
            .tz
            .from_local_datetime(&day.and_hms_opt(0, 0, 0).unwrap_or_default())
            .earliest()
            .map(|d| d.timestamp_millis())
            .unwrap_or(opened - opened.rem_euclid(86_400_000));
        let next_midnight = self
            .tz
            .from_local_datetime(
                &(day + Duration::days(1))
                    .and_hms_opt(0, 0, 0)
                    .unwrap_or_default(),
            )
            .earliest()
            .map(|d| d.timestamp_millis())
            .unwrap_or(start_of_day + 86_400_000);
        let steps = (opened - start_of_day) / period + 1;
        (start_of_day + steps * period).min(next_midnight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_aligns_to_the_local_day() {
        let p = RollingPolicy {
            rules: vec![Rotation::WallClock(3_600_000)],
            tz: "Asia/Kolkata".parse().expect("tz"),
        };
        // 2024-05-01T10:20:00+05:30 → next boundary 11:00+05:30.
        let opened = 1_714_539_000_000;
        assert_eq!(p.next_boundary(opened, 3_600_000), 1_714_541_400_000);
        // A 7-hour period on 2024-05-01 at 22:00 local: capped at midnight.
        let late = 1_714_581_000_000; // 22:00+05:30
        assert_eq!(p.next_boundary(late, 7 * 3_600_000), 1_714_588_200_000);
    }

    #[test]
    fn rules_fire_on_their_own_measure() {
        let p = RollingPolicy {
            rules: vec![
                Rotation::Records(10),
                Rotation::Bytes(100),
                Rotation::RecordTime(1000),
            ],
            tz: chrono_tz::UTC,
        };
        let s = SegmentStats {
            rows: 9,
            bytes: 99,
            opened_wall: 0,
            last_arrival_wall: 500,
        };
        assert_eq!(p.full(&s), None);
        assert_eq!(
            p.full(&SegmentStats { rows: 10, ..s }),
            Some(Rotation::Records(10))
        );
        assert_eq!(
            p.full(&SegmentStats { bytes: 100, ..s }),
            Some(Rotation::Bytes(100))
        );
        assert_eq!(p.due(&s, 1499), None);
        assert_eq!(p.due(&s, 1500), Some(Rotation::RecordTime(1000)));
    }
}
