//! The raw layer for the tests: decoded batches written with `ParquetWriter` to a scratch
//! `file://` directory, its Parquet files, and what pyarrow and DuckDB read from them
//! (`tests/python/read_parquet.py`).

use std::path::{Path, PathBuf};
use std::process::Command;

use lakesink_config::RawConfig;
use lakesink_schema_registry::ChangeBatch;
use lakesink_writers::parquet::ParquetWriter;
use serde_json::Value;

use crate::{Stack, unique};

/// A directory removed when the test ends, passed or failed.
pub struct Scratch(pub PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

/// What [`write_raw`] wrote.
pub struct Written {
    pub dir: Scratch,
    pub config: RawConfig,
    /// Rows in the receipts, and the highest next offset they made durable.
    pub rows: u64,
    pub next: i64,
}

/// Writes `batches` with a `ParquetWriter` configured by `[raw]` keys `extra` (TOML lines) to
/// a fresh `file://` directory, closes everything and waits for every receipt.
pub async fn write_raw(batches: &[ChangeBatch], topic: &str, extra: &str) -> Written {
    let dir = Scratch(std::env::temp_dir().join(unique("raw")));
    std::fs::create_dir_all(&dir.0).expect("temp dir");
    let toml = format!(
        "[kafka]\nbrokers = \"127.0.0.1:9092\"\ntopics = [\"{topic}\"]\n\
         [raw]\nurl = \"file://{}\"\n{extra}\n",
        dir.0.display()
    );
    let config = lakesink_config::Config::from_toml(&toml, "tests", Vec::new())
        .unwrap_or_else(|e| panic!("config: {e}\n{toml}"))
        .raw
        .expect("[raw]");
    let mut writer = ParquetWriter::new(&config).expect("writer");
    let now = chrono::Utc::now().timestamp_millis();
    for b in batches {
        writer.write(b, now).await.expect("write");
    }
    writer.close_all(now).await.expect("close");
    let (mut rows, mut next) = (0, 0);
    while let Some(r) = writer.next_receipt().await {
        let r = r.expect("upload");
        rows += r.rows;
        next = next.max(r.next_offset);
    }
    Written {
        dir,
        config,
        rows,
        next,
    }
}

/// Every Parquet file under `dir`, in key order.
pub fn parquet_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "parquet") {
                found.push(p);
            }
        }
    }
    assert!(!found.is_empty(), "no Parquet file in {}", dir.display());
    found.sort();
    found
}

/// `tests/python/read_parquet.py` with `args`, its JSON output.
pub fn read_parquet<S: AsRef<std::ffi::OsStr>>(stack: &Stack, args: &[S]) -> Value {
    let script = crate::workspace_root().join("tests/python/read_parquet.py");
    let out = Command::new(&stack.python)
        .arg(script)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (run `dev/stack install`)", stack.python));
    assert!(
        out.status.success(),
        "read_parquet.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json from read_parquet.py")
}
