//! Debezium's `io.debezium.time.ZonedTimestamp` text to microseconds since the Unix epoch.
//!
//! Debezium formats the value with Java's `ISO_OFFSET_DATE_TIME`, so besides the common
//! `2024-02-29T12:34:56.789012Z` it writes years past 9999 with a sign (`+294276-…`), years
//! before 1 AD astronomically (`-4712-…` is 4713 BC), any offset, up to nine fractional digits,
//! and PostgreSQL's `infinity` / `-infinity` as those words.

/// `infinity` and `-infinity` as DuckDB and lakesink's Arrow columns hold them: the largest
/// count of the type and its negation (in any timestamp unit, and in days for dates). The
/// replica writes them as PostgreSQL's own.
pub const INFINITY_MICROS: i64 = i64::MAX;
pub const NEG_INFINITY_MICROS: i64 = -i64::MAX;
pub const INFINITY_DAYS: i32 = i32::MAX;
pub const NEG_INFINITY_DAYS: i32 = -i32::MAX;

const NOT_ISO: &str = "not an ISO-8601 timestamp with an offset";

/// Microseconds since the epoch of a Debezium ZonedTimestamp, UTC. A value finer than a
/// microsecond, or past what an i64 of microseconds reaches (294247-01-10), is refused rather
/// than rounded or clamped.
pub(crate) fn zoned_timestamp_micros(text: &str) -> Result<i64, &'static str> {
    if let Some(us) = utc_micros(text.as_bytes()) {
        return Ok(us);
    }
    match text {
        "infinity" => Ok(INFINITY_MICROS),
        "-infinity" => Ok(NEG_INFINITY_MICROS),
        _ => match general_micros(text.as_bytes())? {
            (us, 0) => Ok(us),
            _ => Err("finer than a microsecond, which this column type cannot hold"),
        },
    }
}

/// Checks a ZonedTimestamp that is kept as its text (SQL Server's `datetimeoffset(7)`): the
/// same forms and range as [`zoned_timestamp_micros`], with up to nine fractional digits.
pub(crate) fn check_zoned_timestamp_text(text: &str) -> Result<(), &'static str> {
    if utc_micros(text.as_bytes()).is_some() || matches!(text, "infinity" | "-infinity") {
        return Ok(());
    }
    general_micros(text.as_bytes()).map(drop)
}

/// Days from 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
/// Exact for any year an i64 of days reaches; callers bound the year first.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn valid_date(year: i64, month: i64, day: i64) -> bool {
    let leap = year.rem_euclid(4) == 0 && (year.rem_euclid(100) != 0 || year.rem_euclid(400) == 0);
    let days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    (1..=12).contains(&month) && day >= 1 && day <= days[month as usize - 1]
}

/// The form Debezium writes for UTC (`2024-02-29T12:34:56.789012Z`, 0 to 6 fractional
/// digits), read directly: a general parser was a twentieth of the consuming thread's time,
/// and every value is read twice (when checked and when converted). `None` for anything else,
/// which [`general_micros`] reads.
fn utc_micros(b: &[u8]) -> Option<i64> {
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        b.get(r)?.iter().try_fold(0i64, |n, &c| {
            c.is_ascii_digit().then(|| n * 10 + i64::from(c - b'0'))
        })
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' {
        return None;
    }
    if b[16] != b':' || b[b.len() - 1] != b'Z' {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let frac = match &b[19..b.len() - 1] {
        [] => 0,
        [b'.', digits @ ..] if (1..=6).contains(&digits.len()) => {
            num(20..b.len() - 1)? * 10i64.pow(6 - digits.len() as u32)
        }
        _ => return None,
    };
    if !valid_date(year, month, day) || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some(((days * 24 + hour) * 60 + minute) * 60_000_000 + second * 1_000_000 + frac)
}

/// A cursor over the text, each step checked.
struct Text<'a> {
    b: &'a [u8],
    at: usize,
}

impl Text<'_> {
    fn eat(&mut self, c: u8) -> bool {
        let hit = self.b.get(self.at) == Some(&c);
        self.at += usize::from(hit);
        hit
    }

    fn expect(&mut self, c: u8) -> Result<(), &'static str> {
        if self.eat(c) { Ok(()) } else { Err(NOT_ISO) }
    }

    /// A run of `min..=max` digits: its value and length.
    fn digits(&mut self, min: usize, max: usize) -> Result<(i64, usize), &'static str> {
        let run = self.b[self.at..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        if run < min || run > max {
            return Err(NOT_ISO);
        }
        let v = self.b[self.at..self.at + run]
            .iter()
            .fold(0i64, |n, &c| n * 10 + i64::from(c - b'0'));
        self.at += run;
        Ok((v, run))
    }

    fn two(&mut self) -> Result<i64, &'static str> {
        self.digits(2, 2).map(|(v, _)| v)
    }
}

/// `[+-]YYYY[Y…]-MM-DDTHH:MM[:SS[.f{1,9}]](Z|±HH:MM[:SS])`: the microsecond it falls in
/// (rounded down) and the nanoseconds past it.
fn general_micros(b: &[u8]) -> Result<(i64, i64), &'static str> {
    let mut t = Text { b, at: 0 };
    let negative = t.eat(b'-');
    let signed = negative || t.eat(b'+');
    // java.time's years reach ±999,999,999.
    let (year, len) = t.digits(4, 9)?;
    if len > 4 && !signed {
        return Err(NOT_ISO);
    }
    let year = if negative { -year } else { year };
    t.expect(b'-')?;
    let month = t.two()?;
    t.expect(b'-')?;
    let day = t.two()?;
    t.expect(b'T')?;
    let hour = t.two()?;
    t.expect(b':')?;
    let minute = t.two()?;
    let (mut second, mut nanos) = (0, 0);
    if t.eat(b':') {
        second = t.two()?;
        if t.eat(b'.') {
            let (f, n) = t.digits(1, 9)?;
            nanos = f * 10i64.pow(9 - n as u32);
        }
    }
    let offset = if t.eat(b'Z') {
        0
    } else {
        let sign = if t.eat(b'+') {
            1
        } else if t.eat(b'-') {
            -1
        } else {
            return Err(NOT_ISO);
        };
        let (h, m) = (t.two()?, {
            t.expect(b':')?;
            t.two()?
        });
        let s = if t.eat(b':') { t.two()? } else { 0 };
        if h > 18 || m > 59 || s > 59 {
            return Err(NOT_ISO);
        }
        sign * (h * 3600 + m * 60 + s)
    };
    if t.at != b.len() || !valid_date(year, month, day) || hour > 23 || minute > 59 || second > 59 {
        return Err(NOT_ISO);
    }
    // Years within ±1e9 keep every step inside an i128 by a wide margin.
    let days = i128::from(days_from_civil(year, month, day));
    let seconds = ((days * 24 + i128::from(hour)) * 60 + i128::from(minute)) * 60
        + i128::from(second)
        - i128::from(offset);
    let us = seconds * 1_000_000 + i128::from(nanos / 1000);
    match i64::try_from(us) {
        // The two ends are the infinities.
        Ok(us) if us > NEG_INFINITY_MICROS && us < INFINITY_MICROS => Ok((us, nanos % 1000)),
        _ => Err(
            "beyond what microseconds since 1970 in 64 bits hold (years 290308 BC to 294247 AD)",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_timestamps_read_directly_as_chrono_reads_them() {
        let chrono_micros =
            |t: &str| chrono::DateTime::parse_from_rfc3339(t).map(|t| t.timestamp_micros());
        let mut cases: Vec<String> = [
            "1970-01-01T00:00:00Z",
            "2024-02-29T12:34:56.789012Z",
            "2000-02-29T23:59:59.9Z",
            "1900-03-01T00:00:00.000001Z",
            "0001-01-01T00:00:00Z",
            "9999-12-31T23:59:59.999999Z",
            "1969-12-31T23:59:59.5Z",
            "1600-02-29T01:02:03.04Z",
        ]
        .map(String::from)
        .to_vec();
        // Every day of a few years around leap rules, at varying times and precisions.
        for year in [1899, 1900, 1970, 2000, 2023, 2024, 2100] {
            for day in 0..366i64 {
                let d = chrono::NaiveDate::from_yo_opt(year, 1).unwrap()
                    + chrono::Days::new(day as u64);
                let frac =
                    ["", ".1", ".12", ".123", ".1234", ".12345", ".123456"][day as usize % 7];
                cases.push(format!(
                    "{}T{:02}:{:02}:{:02}{frac}Z",
                    d,
                    day % 24,
                    day % 60,
                    (day * 7) % 60
                ));
            }
        }
        for t in &cases {
            assert_eq!(
                utc_micros(t.as_bytes()),
                Some(chrono_micros(t).unwrap()),
                "{t}"
            );
            assert_eq!(
                zoned_timestamp_micros(t),
                Ok(chrono_micros(t).unwrap()),
                "{t}"
            );
        }
        // Not the direct form: the general parser decides, or it is refused.
        for t in [
            "2024-02-29T12:34:56+01:00",
            "2024-02-29T12:34:56.1234567Z",
            "2024-02-30T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2024-13-01T00:00:00Z",
            "2024-01-01T24:00:00Z",
            "2024-01-01T23:59:60Z",
            "2024-01-01 00:00:00Z",
            "2024-01-01T00:00:00.Z",
            "2024-01-01T00:00:0aZ",
            "+2024-01-01T00:00:00Z",
            "2024-01-01T00:00:00z",
        ] {
            assert_eq!(utc_micros(t.as_bytes()), None, "{t}");
        }
        assert_eq!(
            zoned_timestamp_micros("2024-02-29T13:34:56+01:00"),
            zoned_timestamp_micros("2024-02-29T12:34:56Z")
        );
    }
    #[test]
    fn every_value_postgresql_and_java_write() {
        let us = zoned_timestamp_micros;
        assert_eq!(us("infinity"), Ok(INFINITY_MICROS));
        assert_eq!(us("-infinity"), Ok(NEG_INFINITY_MICROS));
        // 4713 BC is astronomical year -4712; PostgreSQL's first day is 4714-11-24 BC.
        assert_eq!(us("-4713-11-24T00:00:00Z"), Ok(-210_866_803_200_000_000));
        assert_eq!(us("-4712-01-01T00:00:00Z"), Ok(-210_863_520_000_000_000));
        assert_eq!(
            us("0000-12-31T23:59:59.999999Z"),
            Ok(-62_135_596_800_000_001)
        );
        assert_eq!(us("+10000-01-01T00:00:00Z"), Ok(253_402_300_800_000_000));
        assert_eq!(
            us("+294247-01-10T04:00:54.775806Z"),
            Ok(i64::MAX - 1),
            "the last microsecond before infinity's"
        );
        assert!(us("+294247-01-10T04:00:54.775807Z").is_err());
        assert!(
            us("+294276-12-31T23:59:59.999999Z")
                .unwrap_err()
                .contains("294247")
        );
        assert!(us("-290308-12-21T19:59:05.224192Z").is_err());
        assert_eq!(
            us("2024-02-29T13:34:56.5+01:00"),
            us("2024-02-29T12:34:56.500Z")
        );
        assert_eq!(
            us("2024-02-29T12:34:56-00:00:30"),
            us("2024-02-29T12:35:26Z")
        );
        assert_eq!(us("2024-02-29T12:34Z"), us("2024-02-29T12:34:00Z"));
        assert_eq!(
            us("2024-02-29T12:34:56.123456000Z"),
            us("2024-02-29T12:34:56.123456Z")
        );
        assert!(
            us("2024-02-29T12:34:56.1234567Z")
                .unwrap_err()
                .contains("finer")
        );
        for bad in [
            "",
            "-",
            "infinity ",
            "Infinity",
            "12024-01-01T00:00:00Z",
            "+024-01-01T00:00:00Z",
            "2024-01-01T00:00:00",
            "2024-01-01T00:00:00+19:00",
            "2024-01-01T00:00:00+01",
            "2024-02-30T00:00:00Z",
            "2024-01-01T24:00:00Z",
            "2024-01-01T00:00:00.Z",
            "2024-01-01T00:00:00.1234567890Z",
            "+999999999-12-31T23:59:59Z",
        ] {
            assert!(us(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn text_kept_as_sent_takes_up_to_nine_digits() {
        // What Debezium's SQL Server connector writes for `datetimeoffset(7)`: the source's
        // offset, trailing zeros trimmed.
        for ok in [
            "2020-01-01T10:00:00.1234567+05:30",
            "2020-01-01T10:00:00.123456789-08:00",
            "0001-01-01T00:00:00.0000001+14:00",
            "9999-12-31T23:59:59.9999999-14:00",
            "2020-01-01T10:00:00Z",
            "2020-01-01T10:00:00.5Z",
            "infinity",
        ] {
            assert_eq!(check_zoned_timestamp_text(ok), Ok(()), "{ok}");
            // The microsecond form refuses exactly the finer ones.
            let finer = ok
                .split_once('.')
                .is_some_and(|(_, f)| f.bytes().take_while(u8::is_ascii_digit).count() > 6);
            assert_eq!(zoned_timestamp_micros(ok).is_err(), finer, "{ok}");
        }
        for bad in [
            "2020-01-01T10:00:00.1234567890+05:30",
            "2020-01-01T10:00:00.1234567",
            "2020-02-30T10:00:00.1234567Z",
            "+294276-12-31T23:59:59.9999999Z",
            "",
        ] {
            assert!(check_zoned_timestamp_text(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn arbitrary_text_never_panics() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let alphabet = b"0123456789+-:.TZ ";
        for _ in 0..200_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = (seed % 40) as usize;
            let text: String = (0..len)
                .map(|k| alphabet[((seed >> (k % 48)) as usize + k) % alphabet.len()] as char)
                .collect();
            let _ = zoned_timestamp_micros(&text);
            let _ = check_zoned_timestamp_text(&text);
        }
    }
}
