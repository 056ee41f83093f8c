//! Which directory (the "encoded partition") each row goes to, and the record time each row
//! has for time-based partitioning and rotation.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Int32Type, Int64Type, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType,
};
use arrow_array::{Array, ArrayRef, RecordBatch, StructArray};
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::{DataType, TimeUnit};
use chrono::{LocalResult, NaiveDateTime, Offset, TimeZone};
use chrono_tz::Tz;

use super::joda::JodaPattern;

/// Where a row's time comes from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TimeSource {
    /// The Kafka record timestamp (`__timestamp`).
    Record,
    /// A dotted path in the change event, such as `source.ts_ms`.
    Field(Vec<String>),
    /// The wall-clock time the segment was opened at.
    Wallclock,
}

#[derive(Debug, Clone)]
pub(crate) enum Partitioner {
    /// `partition=<n>`.
    Default,
    /// `name=value` for each path.
    Field(Vec<(String, Vec<String>)>),
    /// Buckets of `duration_ms` in `tz`, formatted by `pattern`.
    Time {
        pattern: JodaPattern,
        duration_ms: i64,
        tz: Tz,
    },
}

/// Rows of one batch grouped by directory, each group in row order.
pub(crate) type Groups = Vec<(Arc<str>, Vec<u32>)>;

impl TimeSource {
    pub(crate) fn parse(kind: lakesink_config::TimestampSource, field: Option<&str>) -> Self {
        match (kind, field) {
            (lakesink_config::TimestampSource::Field, Some(f)) => {
                Self::Field(f.split('.').map(str::to_owned).collect())
            }
            (lakesink_config::TimestampSource::Wallclock, _) => Self::Wallclock,
            _ => Self::Record,
        }
    }

    /// The time of each row, epoch milliseconds. Err names the first row without a time.
    pub(crate) fn times(
        &self,
        rows: &RecordBatch,
        wall_ms: i64,
    ) -> Result<Vec<i64>, (usize, String)> {
        let (column, what) = match self {
            Self::Wallclock => return Ok(vec![wall_ms; rows.num_rows()]),
            Self::Record => (
                rows.column_by_name("__timestamp").cloned(),
                "the Kafka timestamp".to_owned(),
            ),
            Self::Field(path) => (lookup(rows, path), format!("field {}", path.join("."))),
        };
        // Tombstones have no value, so no field: their time is the Kafka record's.
        let tombstones = rows
            .column_by_name("__tombstone")
            .and_then(|c| c.as_boolean_opt().cloned());
        let record = rows.column_by_name("__timestamp").cloned();
        let mut out = Vec::with_capacity(rows.num_rows());
        for row in 0..rows.num_rows() {
            let tombstone = tombstones.as_ref().is_some_and(|t| t.value(row));
            let ms = match (&column, tombstone, &record) {
                (_, true, Some(record)) => millis(record, row),
                (Some(column), _, _) => millis(column, row),
                (None, _, _) => return Err((row, format!("the rows have no {what}"))),
            };
            match ms {
                Some(ms) => out.push(ms),
                None => return Err((row, format!("{what} is null or not a time"))),
            }
        }
        Ok(out)
    }
}

/// The column at a dotted path through structs; null where any parent is null.
pub(crate) fn lookup(rows: &RecordBatch, path: &[String]) -> Option<ArrayRef> {
    let (first, rest) = path.split_first()?;
    let mut column = rows.column_by_name(first)?.clone();
    for name in rest {
        let parent: &StructArray = column.as_struct_opt()?;
        let child = parent.column_by_name(name)?.clone();
        column = match parent.nulls() {
            Some(nulls) => {
                let combined = arrow_buffer::NullBuffer::union(Some(nulls), child.nulls());
                arrow_array::make_array(
                    child
                        .into_data()
                        .into_builder()
                        .nulls(combined)
                        .build()
                        .ok()?,
                )
            }
            None => child,
        };
    }
    Some(column)
}

fn millis(column: &ArrayRef, row: usize) -> Option<i64> {
    if column.is_null(row) {
        return None;
    }
    Some(match column.data_type() {
        DataType::Int64 => column.as_primitive::<Int64Type>().value(row),
        DataType::Int32 => i64::from(column.as_primitive::<Int32Type>().value(row)),
        DataType::Timestamp(TimeUnit::Second, _) => {
            column.as_primitive::<TimestampSecondType>().value(row) * 1000
        }
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            column.as_primitive::<TimestampMillisecondType>().value(row)
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => column
            .as_primitive::<TimestampMicrosecondType>()
            .value(row)
            .div_euclid(1000),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => column
            .as_primitive::<TimestampNanosecondType>()
            .value(row)
            .div_euclid(1_000_000),
        DataType::Date32 => {
            i64::from(
                column
                    .as_primitive::<arrow_array::types::Date32Type>()
                    .value(row),
            ) * 86_400_000
        }
        DataType::Utf8 => {
            let s = column.as_string::<i32>().value(row);
            match s.parse::<i64>() {
                Ok(ms) => ms,
                Err(_) => chrono::DateTime::parse_from_rfc3339(s)
                    .ok()?
                    .timestamp_millis(),
            }
        }
        _ => return None,
    })
}

impl Partitioner {
    /// Groups the rows of one batch of Kafka partition `partition` by directory.
    pub(crate) fn group(
        &self,
        rows: &RecordBatch,
        partition: i32,
        times: &[i64],
    ) -> Result<Groups, (usize, String)> {
        let n = rows.num_rows() as u32;
        match self {
            Self::Default => Ok(vec![(
                Arc::from(format!("partition={partition}")),
                (0..n).collect(),
            )]),
            Self::Time {
                pattern,
                duration_ms,
                tz,
            } => {
                let mut groups: Groups = Vec::new();
                // Consecutive rows mostly share a bucket: remember its UTC span.
                let mut span: Option<(i64, i64, usize)> = None;
                for (row, &ts) in times.iter().enumerate() {
                    let index = match span {
                        Some((from, to, i)) if ts >= from && ts < to => i,
                        _ => {
                            let (from, to) = bucket(ts, *duration_ms, tz)
                                .ok_or((row, format!("time {ts} ms is out of range")))?;
                            let mut path = String::new();
                            pattern.format(
                                &tz.timestamp_millis_opt(from)
                                    .single()
                                    .ok_or((row, format!("time {from} ms is out of range")))?,
                                &mut path,
                            );
                            let i = position(&mut groups, &path);
                            span = Some((from, to, i));
                            i
                        }
                    };
                    groups[index].1.push(row as u32);
                }
                Ok(groups)
            }
            Self::Field(fields) => {
                let columns: Vec<(String, ArrayRef)> = fields
                    .iter()
                    .map(|(name, path)| {
                        lookup(rows, path)
                            .map(|c| (name.clone(), c))
                            .ok_or((0, format!("the rows have no field {name}")))
                    })
                    .collect::<Result<_, _>>()?;
                let options = FormatOptions::default().with_null("null");
                let formatters: Vec<(String, ArrayFormatter<'_>)> = columns
                    .iter()
                    .map(|(name, c)| {
                        ArrayFormatter::try_new(c.as_ref(), &options)
                            .map(|f| (name.clone(), f))
                            .map_err(|e| (0, format!("field {name}: {e}")))
                    })
                    .collect::<Result<_, _>>()?;
                let mut groups: Groups = Vec::new();
                for row in 0..rows.num_rows() {
                    let mut path = String::new();
                    for (i, (name, f)) in formatters.iter().enumerate() {
                        if i > 0 {
                            path.push('/');
                        }
                        path.push_str(name);
                        path.push('=');
                        path.push_str(&f.value(row).to_string());
                    }
                    let i = position(&mut groups, &path);
                    groups[i].1.push(row as u32);
                }
                Ok(groups)
            }
        }
    }
}

fn position(groups: &mut Groups, path: &str) -> usize {
    match groups.iter().position(|(p, _)| &**p == path) {
        Some(i) => i,
        None => {
            groups.push((Arc::from(path), Vec::new()));
            groups.len() - 1
        }
    }
}

/// The UTC span of the bucket holding `ts`: Kafka Connect's TimeBasedPartitioner floors the
/// local time to a multiple of the duration and maps it back to UTC.
pub(crate) fn bucket(ts: i64, duration: i64, tz: &Tz) -> Option<(i64, i64)> {
    let offset = |utc_ms: i64| -> Option<i64> {
        let t = chrono::DateTime::from_timestamp_millis(utc_ms)?.naive_utc();
        Some(i64::from(tz.offset_from_utc_datetime(&t).fix().local_minus_utc()) * 1000)
    };
    let to_utc = |local_ms: i64| -> Option<i64> {
        let naive: NaiveDateTime = chrono::DateTime::from_timestamp_millis(local_ms)?.naive_utc();
        match tz.from_local_datetime(&naive) {
            LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => Some(t.timestamp_millis()),
            // A local time skipped by a DST jump: the instant the jump lands on.
            LocalResult::None => Some(local_ms - offset(local_ms)?),
        }
    };
    let local = ts + offset(ts)?;
    let start = local.div_euclid(duration) * duration;
    let from = to_utc(start)?;
    let to = to_utc(start + duration)?.max(from + 1);
    Some((from.min(ts), to.max(ts + 1)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{Field, Fields, Schema};

    fn hourly() -> Partitioner {
        Partitioner::Time {
            pattern: JodaPattern::compile("'dt'=yyyy-MM-dd/'hour'=HH", true).expect("pattern"),
            duration_ms: 3_600_000,
            tz: chrono_tz::UTC,
        }
    }

    fn rows(n: usize) -> RecordBatch {
        let ts: Int64Array = (0..n as i64).collect();
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new(
                "ts_ms",
                DataType::Int64,
                true,
            )])),
            vec![Arc::new(ts)],
        )
        .expect("batch")
    }

    #[test]
    fn time_buckets_group_rows_in_order() {
        let h = 3_600_000;
        let base = 1_714_568_400_000; // 2024-05-01T13:00:00Z
        let times = [base, base + 10, base + h, base + 5, base + h + 1];
        let groups = hourly().group(&rows(5), 0, &times).expect("groups");
        assert_eq!(groups.len(), 2);
        assert_eq!(&*groups[0].0, "dt=2024-05-01/hour=13");
        assert_eq!(groups[0].1, vec![0, 1, 3]);
        assert_eq!(&*groups[1].0, "dt=2024-05-01/hour=14");
        assert_eq!(groups[1].1, vec![2, 4]);
    }

    #[test]
    fn daily_buckets_follow_the_time_zone_across_dst() {
        let tz: Tz = "Europe/Berlin".parse().expect("tz");
        // 2024-03-31 is 23 hours long in Berlin: 00:00+01:00 to 00:00+02:00.
        let start = 1_711_839_600_000; // 2024-03-31T00:00:00+01:00
        let (from, to) = bucket(start + 5 * 3_600_000, 86_400_000, &tz).expect("bucket");
        // Kafka Connect's arithmetic floors the local time by whole days: the bucket starts at
        // local midnight whatever the offset.
        assert_eq!(from, start);
        assert_eq!(to - from, 23 * 3_600_000);
    }

    #[test]
    fn field_partitions_and_time_fields() {
        let region = StringArray::from(vec![Some("eu"), None, Some("eu")]);
        let ts = Int64Array::from(vec![Some(1), Some(2), None]);
        let after = StructArray::from(vec![
            (
                Arc::new(Field::new("region", DataType::Utf8, true)),
                Arc::new(region) as ArrayRef,
            ),
            (
                Arc::new(Field::new("ts", DataType::Int64, true)),
                Arc::new(ts) as ArrayRef,
            ),
        ]);
        let fields: Fields = after.fields().clone();
        let rows = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new(
                "after",
                DataType::Struct(fields),
                true,
            )])),
            vec![Arc::new(after)],
        )
        .expect("batch");
        let p = Partitioner::Field(vec![(
            "region".into(),
            vec!["after".into(), "region".into()],
        )]);
        let groups = p.group(&rows, 0, &[0, 0, 0]).expect("groups");
        assert_eq!(&*groups[0].0, "region=eu");
        assert_eq!(groups[0].1, vec![0, 2]);
        assert_eq!(&*groups[1].0, "region=null");
        let source = TimeSource::Field(vec!["after".into(), "ts".into()]);
        let err = source.times(&rows, 0).unwrap_err();
        assert_eq!(err.0, 2);
        assert_eq!(
            TimeSource::Wallclock.times(&rows, 7).expect("times"),
            vec![7, 7, 7]
        );
    }
}

#[cfg(test)]
mod tombstone_tests {
    use super::*;
    use arrow_array::{BooleanArray, Int64Array, TimestampMillisecondArray};
    use arrow_schema::{Field, Schema};

    #[test]
    fn a_tombstone_takes_the_kafka_time_when_the_field_is_absent() {
        let rows = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new(
                    "__timestamp",
                    DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
                    true,
                ),
                Field::new("__tombstone", DataType::Boolean, false),
                Field::new("ts_ms", DataType::Int64, true),
            ])),
            vec![
                Arc::new(TimestampMillisecondArray::from(vec![5, 6]).with_timezone("UTC")),
                Arc::new(BooleanArray::from(vec![false, true])),
                Arc::new(Int64Array::from(vec![Some(1), None])),
            ],
        )
        .expect("rows");
        let source = TimeSource::Field(vec!["ts_ms".into()]);
        assert_eq!(source.times(&rows, 0).expect("times"), vec![1, 6]);
        let missing = TimeSource::Field(vec!["after".into(), "x".into()]);
        let err = missing.times(&rows, 0).unwrap_err();
        assert_eq!(err, (0, "the rows have no field after.x".to_owned()));
    }
}
