//! Where a change is in its source's log, as text that sorts (bytewise, `COLLATE "C"`) in the
//! log's order: what the stale-event guard compares and history tables record.
//!
//! Every part is fixed-width, so text order is log order within one source:
//! - PostgreSQL: `<last commit LSN>:<LSN>`, each as PostgreSQL prints an LSN but zero-padded
//!   (`00000000/016B3748`). The first part is `source.sequence`'s last committed LSN, which
//!   only grows in the order transactions commit; where Debezium leaves it out (a snapshot
//!   read), the LSN itself. So a stream event of a transaction committed after the snapshot
//!   orders after the snapshot's reads.
//! - MySQL and MariaDB: `<binlog file>:<pos>:<row>`, the file's numeric suffix and the numbers
//!   zero-padded (`mysql-bin.0000000003:00000000000000000154:0000000000`): the binlog is
//!   written in commit order. A snapshot read has no row (`…:00000000000000000154`): it was
//!   read at the binlog's end, so a stream event at that very position (the next
//!   transaction's) came after it, and the shorter text sorts first.
//! - SQL Server and Db2: `<commit_lsn>:<change_lsn>:<event_serial_no>`; a snapshot read has
//!   no change LSN and orders first within its commit LSN.

/// The source block's fields of one row, by name.
pub(crate) trait Source {
    fn text(&self, name: &str) -> Option<&str>;
    fn int(&self, name: &str) -> Option<i64>;
}

/// The row's position, or `None` where its source says nothing this knows how to order.
pub(crate) fn position(s: &impl Source) -> Option<String> {
    if let Some(lsn) = s.int("lsn") {
        let lsn = u64::try_from(lsn).ok()?;
        let commit = s.text("sequence").and_then(last_commit).unwrap_or(lsn);
        return Some(format!("{}:{}", pg_lsn(commit), pg_lsn(lsn)));
    }
    if let (Some(file), Some(pos)) = (s.text("file"), s.int("pos")) {
        let pos = u64::try_from(pos).ok()?;
        let file = binlog_file(file)?;
        if blocking_snapshot(s.text("snapshot")) {
            return Some(format!("{file}:{pos:020}"));
        }
        let row = u64::try_from(s.int("row").unwrap_or(0)).ok()?;
        return Some(format!("{file}:{pos:020}:{row:010}"));
    }
    let commit = s.text("commit_lsn")?;
    if !is_lsn(commit) {
        return None;
    }
    let change = match s.text("change_lsn") {
        Some(c) if is_lsn(c) && c.len() == commit.len() => c.to_owned(),
        Some(_) => return None,
        None => commit.replace(|c: char| c != ':', "0"),
    };
    let serial = u64::try_from(s.int("event_serial_no").unwrap_or(0)).ok()?;
    Some(format!("{commit}:{change}:{serial:020}"))
}

/// Whether Debezium's `source.snapshot` marks a read of an initial (blocking) snapshot.
/// Incremental snapshot reads are not: Debezium emits them where the stream stands.
fn blocking_snapshot(snapshot: Option<&str>) -> bool {
    snapshot.is_some_and(|s| !matches!(s, "false" | "incremental"))
}

/// An LSN as PostgreSQL prints it (`X/Y`), each half zero-padded.
fn pg_lsn(lsn: u64) -> String {
    format!("{:08X}/{:08X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}

/// The last committed LSN of Debezium's PostgreSQL `sequence`: `["<last commit>", "<lsn>"]`.
fn last_commit(sequence: &str) -> Option<u64> {
    let parts: Vec<Option<String>> = serde_json::from_str(sequence).ok()?;
    parts.first()?.as_deref()?.parse().ok()
}

/// A binlog file name with its numeric suffix zero-padded, so that `…000999` sorts before
/// `…1000000`.
fn binlog_file(file: &str) -> Option<String> {
    let digits = file.len() - file.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (base, index) = file.split_at(file.len() - digits);
    let index: u64 = if digits == 0 { 0 } else { index.parse().ok()? };
    Some(format!("{base}{index:010}"))
}

/// SQL Server's and Db2's LSN text: hex digits in fixed-width groups.
fn is_lsn(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c == ':' || c.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[derive(Default)]
    struct Fields {
        text: HashMap<&'static str, &'static str>,
        int: HashMap<&'static str, i64>,
    }

    impl Source for Fields {
        fn text(&self, name: &str) -> Option<&str> {
            self.text.get(name).copied()
        }
        fn int(&self, name: &str) -> Option<i64> {
            self.int.get(name).copied()
        }
    }

    fn of(text: &[(&'static str, &'static str)], int: &[(&'static str, i64)]) -> Option<String> {
        position(&Fields {
            text: text.iter().copied().collect(),
            int: int.iter().copied().collect(),
        })
    }

    #[test]
    fn postgres_orders_by_the_last_commit_then_the_lsn() {
        let snapshot = of(
            &[("sequence", "[null,\"23861064\"]")],
            &[("lsn", 23_861_064)],
        );
        assert_eq!(
            snapshot.as_deref(),
            Some("00000000/016C1748:00000000/016C1748")
        );
        // A transaction begun before the snapshot and committed after: its change's LSN is
        // lower than the snapshot's, its last commit is not.
        let straddling = of(
            &[("sequence", "[\"23861100\",\"23861000\"]")],
            &[("lsn", 23_861_000)],
        );
        let later = of(
            &[("sequence", "[\"23861100\",\"23861300\"]")],
            &[("lsn", 23_861_300)],
        );
        let next_tx = of(
            &[("sequence", "[\"23861400\",\"23861200\"]")],
            &[("lsn", 23_861_200)],
        );
        assert!(snapshot < straddling && straddling < later && later < next_tx);
        let high = of(&[], &[("lsn", 0x1_0000_0000)]);
        assert_eq!(high.as_deref(), Some("00000001/00000000:00000001/00000000"));
        assert!(of(&[], &[("lsn", 0xFFFF_FFFF)]) < high);
        assert_eq!(of(&[], &[("lsn", -1)]), None);
    }

    #[test]
    fn mysql_orders_by_file_position_and_row() {
        let at = |file, pos, row| of(&[("file", file)], &[("pos", pos), ("row", row)]);
        assert_eq!(
            at("mysql-bin.000003", 154, 0).as_deref(),
            Some("mysql-bin.0000000003:00000000000000000154:0000000000")
        );
        assert!(at("mysql-bin.000003", 154, 0) < at("mysql-bin.000003", 154, 1));
        assert!(at("mysql-bin.000003", 154, 9) < at("mysql-bin.000003", 1000, 0));
        assert!(at("mysql-bin.999999", 99_999, 0) < at("mysql-bin.1000000", 4, 0));
        assert_eq!(at("mysql-bin.000001", -4, 0), None);
    }

    #[test]
    fn a_mysql_snapshot_read_orders_before_the_stream_at_its_position() {
        let read = |snapshot| {
            of(
                &[("file", "binlog.000001"), ("snapshot", snapshot)],
                &[("pos", 54_273), ("row", 0)],
            )
        };
        let stream = read("false");
        assert_eq!(
            read("last").as_deref(),
            Some("binlog.0000000001:00000000000000054273")
        );
        for snapshot in [
            "true",
            "first",
            "first_in_data_collection",
            "last_in_data_collection",
            "last",
        ] {
            assert!(read(snapshot) < stream, "{snapshot}");
            // Still after everything earlier in the log.
            let earlier = of(&[("file", "binlog.000001")], &[("pos", 54_272), ("row", 9)]);
            assert!(earlier < read(snapshot), "{snapshot}");
        }
        assert_eq!(read("incremental"), stream);
        assert_eq!(
            stream.as_deref(),
            Some("binlog.0000000001:00000000000000054273:0000000000")
        );
    }

    #[test]
    fn sql_server_and_db2_order_by_commit_change_and_serial() {
        let at = |commit, change: Option<&'static str>, serial| {
            let mut text = vec![("commit_lsn", commit)];
            text.extend(change.map(|c| ("change_lsn", c)));
            of(&text, &[("event_serial_no", serial)])
        };
        let snap = at("00000027:00000758:0003", None, 0);
        assert_eq!(
            snap.as_deref(),
            Some("00000027:00000758:0003:00000000:00000000:0000:00000000000000000000")
        );
        let first = at("00000027:00000760:0005", Some("00000027:00000760:0002"), 1);
        let second = at("00000027:00000760:0005", Some("00000027:00000760:0002"), 2);
        let next = at("00000027:00000790:0003", Some("00000027:00000770:0002"), 1);
        assert!(snap < first && first < second && second < next);
        let db2 = at("00000000:0000150f:0000000000048fca", None, 0);
        assert!(db2.is_some());
        assert_eq!(at("not an lsn", None, 0), None);
        assert_eq!(at("0027:0758", Some("00000027:00000760:0002"), 1), None);
    }

    #[test]
    fn a_source_without_a_position_has_none() {
        assert_eq!(of(&[("db", "x")], &[("ts_ms", 1)]), None);
    }
}
