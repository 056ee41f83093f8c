//! Joda-Time `DateTimeFormat` patterns, as Kafka Connect's `path.format` uses them
//! (`'year'=YYYY/'month'=MM/'day'=dd/'hour'=HH`), compiled once and formatted per bucket.

use chrono::{DateTime, Datelike, Offset, Timelike};
use chrono_tz::Tz;

/// A compiled pattern.
#[derive(Debug, Clone, PartialEq)]
pub struct JodaPattern {
    tokens: Vec<Token>,
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Literal(String),
    Field(char, usize),
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

impl JodaPattern {
    /// Compiles `pattern`. Letters name fields, `'…'` quotes text, `''` is a quote. Text fields
    /// (month and day names) are English only: `english` is false for any other locale.
    pub fn compile(pattern: &str, english: bool) -> Result<Self, String> {
        let mut tokens = Vec::new();
        let mut chars = pattern.chars().peekable();
        let mut literal = String::new();
        while let Some(c) = chars.next() {
            if c == '\'' {
                if chars.peek() == Some(&'\'') {
                    chars.next();
                    literal.push('\'');
                    continue;
                }
                loop {
                    match chars.next() {
                        None => return Err(format!("unclosed quote in {pattern:?}")),
                        Some('\'') if chars.peek() == Some(&'\'') => {
                            chars.next();
                            literal.push('\'');
                        }
                        Some('\'') => break,
                        Some(c) => literal.push(c),
                    }
                }
            } else if c.is_ascii_alphabetic() {
                let mut count = 1;
                while chars.peek() == Some(&c) {
                    chars.next();
                    count += 1;
                }
                if !"yYxMdDHhkKmsSEewaZ".contains(c) {
                    return Err(format!(
                        "{pattern:?}: pattern letter {c:?} is not supported (quote text with '…')"
                    ));
                }
                if !english && (c == 'E' || (c == 'M' && count >= 3) || c == 'a') {
                    return Err(format!(
                        "{pattern:?}: month and day names are only available in English"
                    ));
                }
                if !literal.is_empty() {
                    tokens.push(Token::Literal(std::mem::take(&mut literal)));
                }
                tokens.push(Token::Field(c, count));
            } else {
                literal.push(c);
            }
        }
        if !literal.is_empty() {
            tokens.push(Token::Literal(literal));
        }
        Ok(Self { tokens })
    }

    pub fn format(&self, t: &DateTime<Tz>, out: &mut String) {
        use std::fmt::Write;
        for token in &self.tokens {
            let (c, n) = match token {
                Token::Literal(s) => {
                    out.push_str(s);
                    continue;
                }
                Token::Field(c, n) => (*c, *n),
            };
            let number = match c {
                'y' | 'Y' if n == 2 => i64::from(t.year().rem_euclid(100)),
                'y' | 'Y' => i64::from(t.year()),
                'x' => i64::from(t.iso_week().year()),
                'M' if n >= 3 => {
                    let name = MONTHS[t.month0() as usize];
                    out.push_str(if n == 3 { &name[..3] } else { name });
                    continue;
                }
                'M' => i64::from(t.month()),
                'd' => i64::from(t.day()),
                'D' => i64::from(t.ordinal()),
                'H' => i64::from(t.hour()),
                'k' => i64::from(if t.hour() == 0 { 24 } else { t.hour() }),
                'K' => i64::from(t.hour() % 12),
                'h' => i64::from(if t.hour().is_multiple_of(12) {
                    12
                } else {
                    t.hour() % 12
                }),
                'm' => i64::from(t.minute()),
                's' => i64::from(t.second()),
                'S' => {
                    // Fraction of a second, to n digits.
                    let digits = format!("{:09}", t.nanosecond() % 1_000_000_000);
                    let take = n.min(9);
                    out.push_str(&digits[..take]);
                    for _ in take..n {
                        out.push('0');
                    }
                    continue;
                }
                'E' => {
                    let name = DAYS[t.weekday().num_days_from_monday() as usize];
                    out.push_str(if n <= 3 { &name[..3] } else { name });
                    continue;
                }
                'e' => i64::from(t.weekday().number_from_monday()),
                'w' => i64::from(t.iso_week().week()),
                'a' => {
                    out.push_str(if t.hour() < 12 { "AM" } else { "PM" });
                    continue;
                }
                'Z' => {
                    let secs = t.offset().fix().local_minus_utc();
                    let sign = if secs < 0 { '-' } else { '+' };
                    let (h, m) = (secs.abs() / 3600, secs.abs() % 3600 / 60);
                    let _ = if n == 1 {
                        write!(out, "{sign}{h:02}{m:02}")
                    } else {
                        write!(out, "{sign}{h:02}:{m:02}")
                    };
                    continue;
                }
                _ => continue, // compile() admits only the letters above
            };
            if number < 0 {
                out.push('-');
            }
            let _ = write!(out, "{:0width$}", number.unsigned_abs(), width = n);
        }
    }

    /// Reads back what [`Self::format`] wrote for a bucket start: that instant (epoch ms) and
    /// the span the pattern's finest field covers (an hour for `HH`, a day for `dd`, …). None
    /// when the text does not match, or the pattern has fields that cannot be read back
    /// (week-based, day-of-week, 12-hour, fractions, zones, two-digit years).
    pub fn parse(&self, text: &str, tz: &Tz) -> Option<(i64, i64)> {
        use chrono::TimeZone;
        const DAY: i64 = 86_400_000;
        let (mut year, mut month, mut day, mut ordinal) = (None, None, None, None);
        let (mut hour, mut minute, mut second) = (0u32, 0u32, 0u32);
        let mut span = 366 * DAY;
        let mut rest = text;
        for (i, token) in self.tokens.iter().enumerate() {
            let (c, n) = match token {
                Token::Literal(l) => {
                    rest = rest.strip_prefix(l.as_str())?;
                    continue;
                }
                Token::Field(c, n) => (*c, *n),
            };
            if c == 'M' && n >= 3 {
                let found = MONTHS.iter().position(|name| {
                    let name = if n == 3 { &name[..3] } else { name };
                    rest.starts_with(name)
                })?;
                let len = if n == 3 { 3 } else { MONTHS[found].len() };
                rest = &rest[len..];
                month = Some(found as u32 + 1);
                span = span.min(31 * DAY);
                continue;
            }
            // Adjacent numeric fields have fixed widths; otherwise take every digit.
            let adjacent = matches!(self.tokens.get(i + 1), Some(Token::Field(..)));
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            let take = if adjacent {
                n.max(if c == 'y' || c == 'Y' { 4 } else { 2 })
            } else {
                digits
            };
            if take == 0 || take > digits {
                return None;
            }
            let value: u32 = rest[..take].parse().ok()?;
            rest = &rest[take..];
            match c {
                'y' | 'Y' if n != 2 => year = Some(i32::try_from(value).ok()?),
                'M' => {
                    month = Some(value);
                    span = span.min(31 * DAY);
                }
                'd' => {
                    day = Some(value);
                    span = span.min(DAY);
                }
                'D' => {
                    ordinal = Some(value);
                    span = span.min(DAY);
                }
                'H' => {
                    hour = value;
                    span = span.min(3_600_000);
                }
                'm' => {
                    minute = value;
                    span = span.min(60_000);
                }
                's' => {
                    second = value;
                    span = span.min(1_000);
                }
                _ => return None,
            }
        }
        if !rest.is_empty() {
            return None;
        }
        let year = year?;
        let date = match ordinal {
            Some(o) => chrono::NaiveDate::from_yo_opt(year, o)?,
            None => chrono::NaiveDate::from_ymd_opt(year, month.unwrap_or(1), day.unwrap_or(1))?,
        };
        let local = date.and_hms_opt(hour, minute, second)?;
        let start = tz.from_local_datetime(&local).earliest()?;
        Some((start.timestamp_millis(), span))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn fmt(pattern: &str, tz: Tz, y: i32, mo: u32, d: u32, h: u32) -> String {
        let p = JodaPattern::compile(pattern, true).expect("pattern");
        let t = tz
            .with_ymd_and_hms(y, mo, d, h, 5, 9)
            .single()
            .expect("time");
        let mut s = String::new();
        p.format(&t, &mut s);
        s
    }

    #[test]
    fn connect_layouts() {
        let utc = chrono_tz::UTC;
        assert_eq!(
            fmt(
                "'year'=YYYY/'month'=MM/'day'=dd/'hour'=HH",
                utc,
                2024,
                5,
                1,
                13
            ),
            "year=2024/month=05/day=01/hour=13"
        );
        assert_eq!(
            fmt("'dt'=yyyy-MM-dd/'hour'=HH", utc, 2024, 5, 1, 3),
            "dt=2024-05-01/hour=03"
        );
        assert_eq!(fmt("yyyy-MM-dd/HH", utc, 2024, 12, 31, 23), "2024-12-31/23");
        assert_eq!(
            fmt(
                "yy MMM MMMM EEE EEEE D w mm:ss SSS a ''x''",
                utc,
                2024,
                2,
                5,
                14
            ),
            "24 Feb February Mon Monday 36 6 05:09 000 PM '2024'"
        );
        assert_eq!(
            fmt("HH ZZ", chrono_tz::Asia::Kolkata, 2024, 1, 1, 0),
            "00 +05:30"
        );
    }

    #[test]
    fn bucket_directories_read_back() {
        let utc = chrono_tz::UTC;
        let p = |s: &str| JodaPattern::compile(s, true).expect("pattern");
        let t0 = 1_714_568_400_000; // 2024-05-01T13:00:00Z
        assert_eq!(
            p("'year'=YYYY/'month'=MM/'day'=dd/'hour'=HH")
                .parse("year=2024/month=05/day=01/hour=13", &utc),
            Some((t0, 3_600_000))
        );
        assert_eq!(
            p("yyyy-MM-dd/HH").parse("2024-05-01/13", &utc),
            Some((t0, 3_600_000))
        );
        assert_eq!(
            p("yyyyMMdd").parse("20240501", &utc),
            Some((t0 - 13 * 3_600_000, 86_400_000))
        );
        assert_eq!(
            p("yyyy/MMM").parse("2024/May", &utc),
            Some((t0 - 13 * 3_600_000, 31 * 86_400_000))
        );
        // Local time in the zone: 15:00 in Paris (UTC+2 in May) is 13:00 UTC.
        assert_eq!(
            p("yyyy-MM-dd/HH").parse("2024-05-01/15", &chrono_tz::Europe::Paris),
            Some((t0, 3_600_000))
        );
        assert_eq!(p("yyyy-MM-dd/HH").parse("2024-05-01/x", &utc), None);
        assert_eq!(p("yyyy-MM-dd/HH").parse("2024-05-01/13/extra", &utc), None);
        assert_eq!(p("xxxx-ww").parse("2024-18", &utc), None);
    }

    #[test]
    fn bad_patterns_are_refused() {
        assert!(JodaPattern::compile("'unclosed", true).is_err());
        assert!(JodaPattern::compile("yyyy/qq", true).is_err());
        assert!(JodaPattern::compile("MMM", false).is_err());
        assert!(JodaPattern::compile("yyyy/MM", false).is_ok());
    }
}
