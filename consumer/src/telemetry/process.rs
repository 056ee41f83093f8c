//! The process's own CPU time, memory and file descriptors, read from `/proc/self` at each
//! scrape under Prometheus's conventional `process_*` names (prometheus-client has no
//! collector for them). Nothing is reported where `/proc` is absent.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

/// Linux reports CPU times in USER_HZ ticks, which its ABI fixes at 100 a second.
const TICKS_PER_SECOND: f64 = 100.0;

#[derive(Debug)]
pub(crate) struct Process;

#[derive(Debug, Default, PartialEq)]
struct Reading {
    cpu_seconds: Option<f64>,
    resident_bytes: Option<i64>,
    virtual_bytes: Option<i64>,
    open_fds: Option<i64>,
}

impl Collector for Process {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let r = read();
        if let Some(cpu) = r.cpu_seconds {
            let c = ConstCounter::new(cpu);
            c.encode(encoder.encode_descriptor(
                "process_cpu",
                "User and system CPU time spent",
                Some(&Unit::Seconds),
                c.metric_type(),
            )?)?;
        }
        for (name, help, value, unit) in [
            (
                "process_resident_memory",
                "Resident memory size",
                r.resident_bytes,
                Some(&Unit::Bytes),
            ),
            (
                "process_virtual_memory",
                "Virtual memory size",
                r.virtual_bytes,
                Some(&Unit::Bytes),
            ),
            (
                "process_open_fds",
                "Open file descriptors",
                r.open_fds,
                None,
            ),
        ] {
            if let Some(v) = value {
                let g = ConstGauge::new(v);
                g.encode(encoder.encode_descriptor(name, help, unit, g.metric_type())?)?;
            }
        }
        Ok(())
    }
}

fn read() -> Reading {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mut r = parse(&stat, &status);
    r.open_fds = std::fs::read_dir("/proc/self/fd")
        .ok()
        .and_then(|d| i64::try_from(d.count()).ok());
    r
}

fn parse(stat: &str, status: &str) -> Reading {
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // Fields 14 and 15 (utime, stime) are the 12th and 13th after the name.
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    let cpu_seconds = match (ticks(11), ticks(12)) {
        (Some(u), Some(s)) => Some(u.saturating_add(s) as f64 / TICKS_PER_SECOND),
        _ => None,
    };
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
            .and_then(|k| k.checked_mul(1024))
    };
    Reading {
        cpu_seconds,
        resident_bytes: kib("VmRSS:"),
        virtual_bytes: kib("VmSize:"),
        open_fds: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_and_status_lines_parse() {
        let stat = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 1234 \
                    987654321 3000";
        let status = "Name:\tlakesink\nVmSize:\t  964516 kB\nVmRSS:\t   12288 kB\n";
        let r = parse(stat, status);
        assert_eq!(r.cpu_seconds, Some(3.0));
        assert_eq!(r.resident_bytes, Some(12288 * 1024));
        assert_eq!(r.virtual_bytes, Some(964516 * 1024));
        assert_eq!(parse("", ""), Reading::default());
    }

    #[test]
    fn this_process_reads_on_linux() {
        let r = read();
        assert!(r.resident_bytes.is_some_and(|b| b > 0), "{r:?}");
        assert!(r.cpu_seconds.is_some(), "{r:?}");
    }
}
