//! `LAKESINK__SECTION__KEY=value` environment overrides.
//!
//! Segments are lower-cased and `_` becomes `-`, so `LAKESINK__KAFKA__GROUP_ID` sets
//! `kafka.group-id`. A value is read as a TOML value when it parses as one (`true`, `5`,
//! `["a", "b"]`) and as a plain string otherwise; quote a string that looks like a number.

use crate::ConfigError;

pub const ENV_PREFIX: &str = "LAKESINK__";

/// Applies the overrides; returns each key path set and the variable that set it.
pub(crate) fn apply(
    doc: &mut toml::Table,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Vec<(Vec<String>, String)>, ConfigError> {
    let mut vars: Vec<(String, String)> = env
        .into_iter()
        .filter(|(k, _)| k.starts_with(ENV_PREFIX))
        .collect();
    // Deterministic order, whatever order the environment lists them in.
    vars.sort();
    let mut applied = Vec::new();
    for (var, raw) in vars {
        let path: Vec<String> = var[ENV_PREFIX.len()..]
            .split("__")
            .map(|s| s.to_lowercase().replace('_', "-"))
            .collect();
        if path.iter().any(String::is_empty) {
            return Err(ConfigError::Env {
                var,
                message: "empty key segment".into(),
            });
        }
        set(doc, &path, parse_value(&raw)).map_err(|message| ConfigError::Env {
            var: var.clone(),
            message,
        })?;
        applied.push((path, var));
    }
    Ok(applied)
}

/// The variable that overrides the key at `path`: `["raw", "flush-size"]` gives
/// `LAKESINK__RAW__FLUSH_SIZE`.
pub(crate) fn var_name(path: &[String]) -> String {
    let segments: Vec<String> = path
        .iter()
        .map(|s| s.to_uppercase().replace('-', "_"))
        .collect();
    format!("{ENV_PREFIX}{}", segments.join("__"))
}

fn parse_value(raw: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_owned()))
}

fn set(doc: &mut toml::Table, path: &[String], value: toml::Value) -> Result<(), String> {
    let (last, parents) = path.split_last().ok_or("no key after the prefix")?;
    let mut table = doc;
    for key in parents {
        let entry = table
            .entry(key.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        table = entry
            .as_table_mut()
            .ok_or_else(|| format!("`{key}` is a value, not a section"))?;
    }
    table.insert(last.clone(), value);
    Ok(())
}
